// The happy path through trainctl against a real daemon: submit a job file
// and watch it to SUCCEEDED, show/list/logs/node, export the model, and the
// exported directory loads in the engine and in transformers
// (tests/ref/check_hf_export.py) with the same logits; sd_notify READY,
// STATUS and WATCHDOG reach the notification socket.
#define _GNU_SOURCE
#include <jansson.h>

#include "e2e/daemon.h"
#include "engine.h"
#include "model/safetensors.h"
#include "python.h"

enum { B = 2, T = 64 };

static json_t *json_of(const char *text) {
  json_error_t je;
  json_t *j = json_loads(text, 0, &je);
  CHECK(j, "not JSON (%s): %s", je.text, text);
  return j;
}

// Logits of the exported model on the start of the demo text, through the
// engine; then transformers must agree.
static void check_export(const char *dir) {
  eng_spec s;
  eng_spec_defaults(&s);
  s.model_dir = dir;
  s.batch = B;
  s.seq_len = T;
  s.device_cap = (size_t)64 << 20;
  eng_err e = {0};
  eng_run *r;
  CHECK_OK(eng_open(&s, &r, &e), &e);
  int32_t ids[B * T];
  char path[1024];
  snprintf(path, sizeof path, "%s/data/demo/licenses.txt", TRAIND_SOURCE_DIR);
  FILE *f = fopen(path, "rb");
  CHECK(f, "cannot read %s", path);
  for (int i = 0; i < B * T; i++) ids[i] = fgetc(f) & 0xff;
  fclose(f);
  int V = eng_run_config(r)->vocab;
  float *logits = malloc((size_t)B * T * V * sizeof(float));
  double loss;
  CHECK_OK(eng_debug_grads(r, ids, ids, NULL, &loss, logits, &e), &e);
  CHECK(loss > 0 && loss < 6, "the exported model's loss %g is not that of a trained byte model", loss);
  eng_close(r);
  py_check_hf_export(dir, tmp_path("engine-logits.safetensors"), ids, logits, B, T, V, NULL);
  free(logits);
}

int main(void) {
  td t;
  td_init(&t);
  td_start(&t);
  char out[65536], id[64];

  const char *job = td_jobfile("happy.yaml", 40, 10, NULL);
  int rc = td_ctl(&t, out, sizeof out, "submit %s --watch", job);
  CHECK(rc == 0, "trainctl submit --watch exited %d:\n%s", rc, out);
  CHECK(sscanf(out, "%63s", id) == 1 && id[0] == 'j', "no job id first in the output:\n%s", out);
  CHECK(strstr(out, "step 40/40") && strstr(out, "SUCCEEDED"), "the watch did not show the end:\n%s", out);

  CHECK(td_ctl(&t, out, sizeof out, "show --json %s", id) == 0, "show failed");
  json_t *j = json_of(out);
  CHECK(!strcmp(json_string_value(json_object_get(j, "state")), "JOB_STATE_SUCCEEDED"), "state: %s", out);
  json_t *prog = json_object_get(j, "progress");
  CHECK(json_integer_value(json_object_get(prog, "step")) == 40, "progress.step: %s", out);
  CHECK(json_integer_value(json_object_get(j, "checkpoint_step")) == 40, "checkpoint_step: %s", out);
  json_decref(j);

  CHECK(td_ctl(&t, out, sizeof out, "list --json") == 0, "list failed");
  CHECK(strstr(out, id), "list does not show %s:\n%s", id, out);
  CHECK(td_ctl(&t, out, sizeof out, "node --json") == 0 && strstr(out, "\"cpu\""), "node:\n%s", out);
  const char *route;
  eng_err re = {0};
  CHECK_OK(eng_cpu_gemm_route(&route, NULL, &re), &re);
  char says[64];
  snprintf(says, sizeof says, "products on the %s route", route);
  CHECK(strstr(out, says), "node does not say '%s':\n%s", says, out);
  CHECK(td_ctl(&t, out, sizeof out, "logs %s", id) == 0, "logs failed");
  CHECK(strstr(out, "QUEUED: submitted") && strstr(out, "checkpoint at step 10") && strstr(out, "SUCCEEDED"),
        "logs:\n%s", out);
  CHECK(td_ctl(&t, out, sizeof out, "show nosuchjob") == 3, "show of an unknown job must exit 3");
  CHECK(td_ctl(&t, out, sizeof out, "cancel %s", id) == 3, "cancelling a finished job must exit 3");

  const char *dir = tmp_path("export");
  rc = td_ctl(&t, out, sizeof out, "export %s %s", id, dir);
  CHECK(rc == 0, "export exited %d:\n%s", rc, out);
  check_export(dir);
  printf("submit, watch, show, list, logs, node, export: ok; transformers agrees\n");

  // systemd's protocol beyond READY: the watchdog's pings (every 200 ms
  // here) and a STATUS that follows the queue, idle after the job.
  td_wait_notified(&t, 1, "serving; idle, 0 queued", 60);
  double took;
  int st = td_stop(&t, SIGTERM, 30, &took);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "traind did not exit 0 on SIGTERM");
  td_finish(&t);
  return 0;
}
