// A .bin token shard truncated while a job trains on it: the job fails,
// naming the file and both sizes, and the daemon lives on (it read the
// shard through a mapping, and a truncated mapping is SIGBUS).
#define _GNU_SOURCE
#include "e2e/daemon.h"
#include "fixture.h"

enum { HEADER = 1024, TOKENS = 64 * 4 * 2000 };

int main(void) {
  td t;
  td_init(&t);
  td_root_fixtures(&t);
  td_start(&t);

  // An llm.c shard of uint16 tokens: 2000 samples of batch 4 x seq_len 64.
  size_t size = HEADER + 2 * (size_t)TOKENS;
  unsigned char *shard = calloc(1, size);
  int32_t head[3] = {20240520, 1, TOKENS};
  memcpy(shard, head, sizeof head);
  for (size_t i = 0; i < TOKENS; i++) {
    uint16_t tok = (uint16_t)(i * 7 % 512);
    memcpy(shard + HEADER + 2 * i, &tok, 2);
  }
  const char *path = tmp_path("data/train.bin");
  td_write(path, shard, size);
  free(shard);

  const char *id = td_submit(&t, td_jobfile_hf("shrink", fx_dir("qwen3"), path, 1000000), NULL);
  char job[80];
  snprintf(job, sizeof job, "%s", id);
  td_wait_step(&t, job, 2, 300);
  // One sample left: the next batch reads past the end.
  CHECK(truncate(path, HEADER + 2 * 64) == 0, "truncate %s", path);
  Traind__V1__Job *j = td_wait_done(&t, job, 300);
  char want[200];
  snprintf(want, sizeof want, "train.bin: shrank from %zu to %d bytes", size, HEADER + 2 * 64);
  CHECK(j->state == TRAIND__V1__JOB_STATE__JOB_STATE_FAILED && strstr(j->error, want),
        "job %s ended in state %d: %s (expected FAILED with \"%s\")", job, j->state, j->error, want);
  printf("truncated under the job: FAILED: %s\n", j->error);
  protobuf_c_message_free_unpacked(&j->base, NULL);
  td_finish(&t); // the daemon is alive and exits 0
  return 0;
}
