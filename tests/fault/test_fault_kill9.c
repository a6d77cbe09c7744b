// kill -9 of the daemon in the middle of training, then a restart: the job
// resumes from its last checkpoint and finishes with a final loss
// bit-identical to an uninterrupted run of the same spec; no job is lost or
// duplicated. Three times: a plain job; a POET-X job (method poetx, merges
// every 30 steps, so the resume passes the merges at 90, 120 and 150),
// whose checkpoint then exports through the daemon (the effective weights,
// checked against transformers in test_parity_export); and a job of Qwen3.5's
// hybrid from a Qwen3_5ForConditionalGeneration directory
// (tests/fixtures/qwen3_5_vlm), whose export through the restarted daemon
// transformers loads as that class and scores like the engine, with the
// source's vision and MTP tensors bit for bit.
#define _GNU_SOURCE
#include "e2e/daemon.h"
#include "fixture.h"
#include "python.h"

// A job of 160 steps of model (a YAML model section), a checkpoint every 20,
// with `training` lines added to its training section.
static const char *job_of(const char *name, const char *model, const char *training) {
  const char *path = tmp_path(name);
  FILE *f = fopen(path, "w");
  CHECK(f, "cannot write %s", path);
  fprintf(f,
          "name: %s\n%s"
          "data:\n  train_path: %s/data/demo/licenses.txt\n"
          "training:\n  steps: 160\n  batch_size: 4\n  seq_len: 64\n  lr: 3e-3\n  min_lr: 3e-4\n"
          "  warmup_steps: 5\n%s"
          "checkpoints:\n  every_steps: 20\n  keep: 2\n"
          "device:\n  memory_bytes: 256M\n"
          "seed: 42\n",
          name, model, TRAIND_SOURCE_DIR, training);
  fclose(f);
  return path;
}

// The tiny model's.
static const char *job(const char *name, const char *training) { return job_of(name, TD_TINY_MODEL, training); }

// Kills the daemon past step 70 of a job of `file`, restarts it, and checks
// the job's resume and final loss against a second, uninterrupted job; the
// daemon then holds `jobs` jobs (these two among them). The resumed job's id
// into id.
static void kill_and_resume(td *t, const char *file, const char *what, int jobs, char *id, size_t n) {
  char b[80];
  snprintf(id, n, "%s", td_submit(t, file, NULL));
  td_wait_step(t, id, 70, 120);
  td_stop(t, SIGKILL, 10, NULL);
  printf("killed the daemon with %s %s past step 70\n", what, id);

  td_start(t);
  Traind__V1__Job *ja = td_wait_done(t, id, 300);
  CHECK(ja->state == TRAIND__V1__JOB_STATE__JOB_STATE_SUCCEEDED, "job %s ended %d: %s", id, ja->state, ja->error);
  CHECK(ja->attempts == 2, "job %s was started %d times, expected 2", id, ja->attempts);
  CHECK(ja->progress->step == 160, "job %s stopped at step %lld", id, (long long)ja->progress->step);
  char logs[1 << 16];
  td_logs(t, id, logs, sizeof logs);
  const char *p = strstr(logs, "interrupted by a daemon restart; resumes from the checkpoint at step ");
  CHECK(p, "no interruption event in the log:\n%s", logs);
  long from = atol(p + strlen("interrupted by a daemon restart; resumes from the checkpoint at step "));
  CHECK(from >= 60 && from % 20 == 0, "resumed from step %ld, expected the last checkpoint (>= 60)", from);
  char want[128];
  snprintf(want, sizeof want, "resumed from the checkpoint at step %ld", from);
  CHECK(strstr(logs, want), "the runner did not report \"%s\":\n%s", want, logs);

  snprintf(b, sizeof b, "%s", td_submit(t, file, NULL));
  Traind__V1__Job *jb = td_wait_done(t, b, 300);
  CHECK(jb->state == TRAIND__V1__JOB_STATE__JOB_STATE_SUCCEEDED, "job %s ended %d", b, jb->state);
  CHECK(!memcmp(&ja->progress->loss, &jb->progress->loss, sizeof(double)),
        "%s: final loss after kill -9 and resume %.17g != uninterrupted %.17g", what, ja->progress->loss,
        jb->progress->loss);
  printf("%s resumed from step %ld; final loss %.17g, bit-identical to the uninterrupted run\n", what, from,
         ja->progress->loss);

  char out[16384];
  CHECK(td_ctl(t, out, sizeof out, "list --json") == 0, "list failed");
  int count = 0;
  for (const char *q = out; (q = strstr(q, "\"id\"")); q++) count++;
  CHECK(count == jobs, "expected exactly %d jobs after the crash, found %d:\n%s", jobs, count, out);
  protobuf_c_message_free_unpacked(&ja->base, NULL);
  protobuf_c_message_free_unpacked(&jb->base, NULL);
}

int main(void) {
  td t;
  td_init(&t);
  td_root_fixtures(&t);
  td_start(&t);
  char a[80];
  kill_and_resume(&t, job("kill9.yaml", ""), "job", 2, a, sizeof a);
  kill_and_resume(&t,
                  job("poet.yaml", "  method: poetx\n  poet:\n    block_size: 16\n    merge_every: 30\n    lr: 2e-3\n"),
                  "POET-X job", 4, a, sizeof a);

  const char *dir = tmp_path("poet-export");
  char out[4096], file[700];
  CHECK(td_ctl(&t, out, sizeof out, "export %s %s", a, dir) == 0, "export of the POET-X job failed: %s", out);
  snprintf(file, sizeof file, "%s/model.safetensors", dir);
  CHECK(access(file, R_OK) == 0, "the export has no %s", file);
  printf("exported the POET-X job's checkpoint to %s\n", dir);

  // The hybrid as the published checkpoints are: a Qwen3_5ForConditionalGeneration
  // whose vision and MTP tensors the export must carry through a restart.
  kill_and_resume(&t, job_of("hybrid.yaml", "model:\n  hf_dir: " TRAIND_SOURCE_DIR "/tests/fixtures/qwen3_5_vlm\n", ""),
                  "Qwen3.5 hybrid job (Qwen3_5ForConditionalGeneration)", 6, a, sizeof a);
  dir = tmp_path("hybrid-export");
  CHECK(td_ctl(&t, out, sizeof out, "export %s %s", a, dir) == 0, "export of the hybrid job failed: %s", out);
  // The engine scores the export; transformers loads it and must agree.
  enum { B = 2, T = 64 };
  eng_run *r = fx_run_open(dir, B, T);
  CHECK(eng_run_config(r)->full_every == 3 && eng_run_config(r)->vlm, "the export is not the multimodal hybrid");
  const int V = eng_run_config(r)->vocab;
  int32_t ids[B * T];
  for (int i = 0; i < B * T; i++) ids[i] = (i * 7919 + 13) % V;
  float *logits = malloc((size_t)B * T * V * sizeof(float));
  double loss;
  eng_err e = {0};
  CHECK_OK(eng_debug_grads(r, ids, ids, NULL, &loss, logits, &e), &e);
  py_check_hf_export(dir, tmp_path("engine-logits.safetensors"), ids, logits, B, T, V,
                     TRAIND_SOURCE_DIR "/tests/fixtures/qwen3_5_vlm");
  printf("exported the hybrid job to %s; transformers loads it as Qwen3_5ForConditionalGeneration, scores it as "
         "the engine does, and its vision and MTP tensors are the source's\n", dir);
  free(logits);
  eng_close(r);
  td_finish(&t);
  return 0;
}
