// A POET-X job (method poetx) through a real daemon: kill -9 in the middle
// of training, then a restart: the job resumes from its last checkpoint,
// passes the merges after it (every 30 steps) and finishes with a final loss
// bit-identical to an uninterrupted run of the same spec. Its export holds
// the effective weights (checked against transformers in
// test_parity_export); here, that exporting a POET-X checkpoint through the
// daemon works and gives a plain model directory.
#define _GNU_SOURCE
#include "e2e/daemon.h"

static const char *poet_job(const char *name) {
  const char *path = tmp_path(name);
  FILE *f = fopen(path, "w");
  CHECK(f, "cannot write %s", path);
  fprintf(f,
          "name: %s\n" TD_TINY_MODEL
          "data:\n  train_path: %s/data/demo/licenses.txt\n"
          "training:\n  steps: 160\n  batch_size: 4\n  seq_len: 64\n  lr: 3e-3\n  min_lr: 3e-4\n"
          "  warmup_steps: 5\n  method: poetx\n  poet:\n    block_size: 16\n    merge_every: 30\n    lr: 2e-3\n"
          "checkpoints:\n  every_steps: 20\n  keep: 2\n"
          "device:\n  memory_bytes: 256M\n"
          "seed: 42\n",
          name, TRAIND_SOURCE_DIR);
  fclose(f);
  return path;
}

int main(void) {
  td t;
  td_init(&t);
  td_start(&t);
  const char *file = poet_job("poet.yaml");
  char a[80], b[80];
  snprintf(a, sizeof a, "%s", td_submit(&t, file, NULL));
  td_wait_step(&t, a, 70, 120);
  td_stop(&t, SIGKILL, 10, NULL);
  printf("killed the daemon with POET-X job %s past step 70\n", a);

  td_start(&t);
  Traind__V1__Job *ja = td_wait_done(&t, a, 300);
  CHECK(ja->state == TRAIND__V1__JOB_STATE__JOB_STATE_SUCCEEDED, "job %s ended %d: %s", a, ja->state, ja->error);
  CHECK(ja->attempts == 2 && ja->progress->step == 160, "job %s: %d attempts, step %lld", a, ja->attempts,
        (long long)ja->progress->step);
  char logs[1 << 16];
  td_logs(&t, a, logs, sizeof logs);
  const char *p = strstr(logs, "resumed from the checkpoint at step ");
  CHECK(p, "the job did not resume from a checkpoint:\n%s", logs);
  long from = atol(p + strlen("resumed from the checkpoint at step "));
  CHECK(from >= 60 && from % 20 == 0, "resumed from step %ld, expected the last checkpoint (>= 60)", from);

  snprintf(b, sizeof b, "%s", td_submit(&t, file, NULL));
  Traind__V1__Job *jb = td_wait_done(&t, b, 300);
  CHECK(jb->state == TRAIND__V1__JOB_STATE__JOB_STATE_SUCCEEDED, "job %s ended %d", b, jb->state);
  CHECK(!memcmp(&ja->progress->loss, &jb->progress->loss, sizeof(double)),
        "final loss after kill -9 and resume %.17g != uninterrupted %.17g", ja->progress->loss, jb->progress->loss);
  printf("resumed from step %ld across the merges at 90, 120, 150; final loss %.17g, bit-identical to the "
         "uninterrupted run\n", from, ja->progress->loss);

  const char *dir = tmp_path("poet-export");
  char out[4096];
  CHECK(td_ctl(&t, out, sizeof out, "export %s %s", a, dir) == 0, "export of the POET-X job failed: %s", out);
  char cfg[700];
  snprintf(cfg, sizeof cfg, "%s/model.safetensors", dir);
  CHECK(access(cfg, R_OK) == 0, "the export has no %s", cfg);
  printf("exported %s\n", dir);
  protobuf_c_message_free_unpacked(&ja->base, NULL);
  protobuf_c_message_free_unpacked(&jb->base, NULL);
  td_finish(&t);
  return 0;
}
