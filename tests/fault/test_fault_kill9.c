// kill -9 of the daemon in the middle of training, then a restart: the job
// resumes from its last checkpoint and finishes with a final loss
// bit-identical to an uninterrupted run of the same spec; no job is lost or
// duplicated.
#define _GNU_SOURCE
#include "e2e/daemon.h"

int main(void) {
  td t;
  td_init(&t);
  td_start(&t);
  const char *file = td_jobfile("kill9.yaml", 160, 20, NULL);
  char a[80], b[80];
  snprintf(a, sizeof a, "%s", td_submit(&t, file, NULL));
  td_wait_step(&t, a, 70, 120);
  td_stop(&t, SIGKILL, 10, NULL);
  printf("killed the daemon with job %s past step 70\n", a);

  td_start(&t);
  Traind__V1__Job *ja = td_wait_done(&t, a, 300);
  CHECK(ja->state == TRAIND__V1__JOB_STATE__JOB_STATE_SUCCEEDED, "job %s ended %d: %s", a, ja->state, ja->error);
  CHECK(ja->attempts == 2, "job %s was started %d times, expected 2", a, ja->attempts);
  CHECK(ja->progress->step == 160, "job %s stopped at step %lld", a, (long long)ja->progress->step);
  char logs[1 << 16];
  td_logs(&t, a, logs, sizeof logs);
  const char *p = strstr(logs, "interrupted by a daemon restart; resumes from the checkpoint at step ");
  CHECK(p, "no interruption event in the log:\n%s", logs);
  long from = atol(p + strlen("interrupted by a daemon restart; resumes from the checkpoint at step "));
  CHECK(from >= 60 && from % 20 == 0, "resumed from step %ld, expected the last checkpoint (>= 60)", from);
  char want[128];
  snprintf(want, sizeof want, "resumed from the checkpoint at step %ld", from);
  CHECK(strstr(logs, want), "the runner did not report \"%s\":\n%s", want, logs);

  snprintf(b, sizeof b, "%s", td_submit(&t, file, NULL));
  Traind__V1__Job *jb = td_wait_done(&t, b, 300);
  CHECK(jb->state == TRAIND__V1__JOB_STATE__JOB_STATE_SUCCEEDED, "job %s ended %d", b, jb->state);
  CHECK(!memcmp(&ja->progress->loss, &jb->progress->loss, sizeof(double)),
        "final loss after kill -9 and resume %.17g != uninterrupted %.17g", ja->progress->loss, jb->progress->loss);
  printf("resumed from step %ld; final loss %.17g, bit-identical to the uninterrupted run\n", from, ja->progress->loss);

  char out[8192];
  CHECK(td_ctl(&t, out, sizeof out, "list --json") == 0, "list failed");
  int n = 0;
  for (const char *q = out; (q = strstr(q, "\"id\"")); q++) n++;
  CHECK(n == 2, "expected exactly 2 jobs after the crash, found %d:\n%s", n, out);
  protobuf_c_message_free_unpacked(&ja->base, NULL);
  protobuf_c_message_free_unpacked(&jb->base, NULL);
  td_finish(&t);
  return 0;
}
