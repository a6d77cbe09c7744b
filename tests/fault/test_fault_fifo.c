// FIFOs where a job expects files, through a real daemon: nothing blocks.
// Opening a FIFO for reading waits for a writer, so a config.json that is
// one stalled the loop thread in SubmitJob, and a model.safetensors that is
// one stalled the runner in open(): the job sat RUNNING and CancelJob could
// not stop it. Now each file is opened without blocking and refused by name.
#define _GNU_SOURCE
#include "e2e/daemon.h"
#include "fixture.h"

#define FAILED TRAIND__V1__JOB_STATE__JOB_STATE_FAILED

static td t;
static char msg[8192];

int main(void) {
  td_init(&t);
  td_start(&t);
  const char *qwen3 = fx_dir("qwen3");

  const char *dir = tmp_path("data/fifo_config");
  td_sh("mkdir -p %s && cp %s/model.safetensors %s/ && mkfifo %s/config.json", dir, qwen3, dir, dir);
  int st = td_submit_outcome(&t, td_jobfile_hf("fifo_config", dir, NULL, 2), msg, sizeof msg, 300);
  CHECK(st == -1 && strstr(msg, "config.json: is a FIFO, not a regular file"), "config.json a FIFO: state %d: %s", st,
        msg);
  printf("config.json a FIFO: refused: %s", msg);

  dir = tmp_path("data/fifo_weights");
  td_sh("mkdir -p %s && cp %s/config.json %s/ && mkfifo %s/model.safetensors", dir, qwen3, dir, dir);
  st = td_submit_outcome(&t, td_jobfile_hf("fifo_weights", dir, NULL, 2), msg, sizeof msg, 300);
  CHECK((st == -1 || st == FAILED) && strstr(msg, "model.safetensors: is a FIFO, not a regular file"),
        "model.safetensors a FIFO: state %d: %s", st, msg);
  printf("model.safetensors a FIFO: %s: %s\n", st == -1 ? "refused" : "failed", msg);

  // The daemon still serves: a good job after them runs.
  st = td_submit_outcome(&t, td_jobfile("after.yaml", 2, 2, NULL), msg, sizeof msg, 300);
  CHECK(st == TRAIND__V1__JOB_STATE__JOB_STATE_SUCCEEDED, "the next job ended in state %d: %s", st, msg);
  td_finish(&t);
  return 0;
}
