// Memory admission against a real daemon: a job whose host bytes (model
// state, arena) exceed host_memory_bytes fails when it would start, with the
// numbers, is not started nor requeued, and the job queued behind it runs.
#define _GNU_SOURCE
#include "e2e/daemon.h"

#define K(x) TRAIND__V1__##x

int main(void) {
  td t;
  td_init(&t);
  td_set(&t, "host_memory_bytes=64M");
  td_start(&t);
  // ~25M parameters: ~200 MB of fp32 master, gradients and moments.
  const char *big = td_jobfile_model("big.yaml",
                                     "model:\n  config:\n    arch: qwen3\n    vocab_size: 256\n    hidden_size: 512\n"
                                     "    num_hidden_layers: 8\n    num_attention_heads: 8\n    num_key_value_heads: 8\n"
                                     "    head_dim: 64\n    intermediate_size: 2048\n    max_position_embeddings: 512\n",
                                     2, 1, NULL);
  char a[80], b[80];
  snprintf(a, sizeof a, "%s", td_submit(&t, big, NULL));
  snprintf(b, sizeof b, "%s", td_submit(&t, td_jobfile("small.yaml", 8, 4, NULL), NULL));
  Traind__V1__Job *ja = td_wait_done(&t, a, 300);
  CHECK(ja->state == K(JOB_STATE__JOB_STATE_FAILED), "job %s ended %d, expected FAILED", a, ja->state);
  CHECK(strstr(ja->error, "host memory: the job needs ") && strstr(ja->error, "host_memory_bytes 67108864 (0.06 GiB)") &&
            strstr(ja->error, "MemAvailable "),
        "job %s: the error does not give the numbers: %s", a, ja->error);
  long long need = atoll(ja->error + strlen("host memory: the job needs "));
  CHECK(need > 64 << 20 && need < 1LL << 30, "job %s: needs %lld bytes?", a, need);
  CHECK(ja->attempts == 0, "job %s was started %d times", a, ja->attempts);
  td_wait_success(&t, b, 300);
  printf("job %s refused: %s\njob %s behind it SUCCEEDED\n", a, ja->error, b);
  protobuf_c_message_free_unpacked(&ja->base, NULL);
  td_finish(&t);
  return 0;
}
