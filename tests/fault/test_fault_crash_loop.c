// A job during which the daemon dies again and again (here kill -9; in the
// field the OOM killer) is not requeued forever: after max_crashes (3)
// daemon deaths it fails, saying so, and the job queued behind it runs.
#define _GNU_SOURCE
#include "e2e/daemon.h"

#define K(x) TRAIND__V1__##x

int main(void) {
  td t;
  td_init(&t);
  td_start(&t);
  char a[80], b[80], line[160];
  snprintf(a, sizeof a, "%s", td_submit(&t, td_jobfile("crasher.yaml", 1000000, 1000, NULL), NULL));
  snprintf(b, sizeof b, "%s", td_submit(&t, td_jobfile("behind.yaml", 12, 6, NULL), NULL));
  for (int k = 1; k <= 3; k++) {
    snprintf(line, sizeof line, "job %s: RUNNING (started on cpu (attempt %d))", a, k);
    td_wait_log(&t, line, 0, 120);
    td_wait_step(&t, a, 1, 120);
    td_stop(&t, SIGKILL, 10, NULL);
    printf("killed the daemon with job %s running (attempt %d)\n", a, k);
    td_start(&t);
  }
  Traind__V1__Job *ja = td_wait_done(&t, a, 60);
  CHECK(ja->state == K(JOB_STATE__JOB_STATE_FAILED), "job %s ended %d, expected FAILED", a, ja->state);
  CHECK(!strcmp(ja->error, "the daemon died while running this job (3 times)"), "job %s: error \"%s\"", a, ja->error);
  CHECK(ja->crashes == 3 && ja->attempts == 3, "job %s: %d crashes, %d attempts; expected 3 and 3", a, ja->crashes,
        ja->attempts);
  Traind__V1__Job *jb = td_wait_done(&t, b, 300);
  CHECK(jb->state == K(JOB_STATE__JOB_STATE_SUCCEEDED), "job %s ended %d: %s", b, jb->state, jb->error);
  CHECK(jb->crashes == 0, "job %s counted %d crashes", b, jb->crashes);
  char logs[1 << 16];
  td_logs(&t, a, logs, sizeof logs);
  CHECK(strstr(logs, "(the daemon died while it ran: 2 times; at 3 it fails)"), "no crash count in the events:\n%s", logs);
  printf("job %s: FAILED (%s); job %s behind it SUCCEEDED\n", a, ja->error, b);
  protobuf_c_message_free_unpacked(&ja->base, NULL);
  protobuf_c_message_free_unpacked(&jb->base, NULL);
  td_finish(&t);
  return 0;
}
