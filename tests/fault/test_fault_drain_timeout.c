// A drain that runs out of time (drain_timeout_s) exits while the job is
// still busy (here: its planner calibrating this machine, which measures
// for about 10 s by design, daemon/planning.c CALIBRATE_SECONDS, and which
// no cancel flag reaches). That is a planned stop, not the daemon dying
// under the job: after the restart the job is not counted a crash
// (max_crashes), and it runs to its end.
#define _GNU_SOURCE
#include "e2e/daemon.h"

int main(void) {
  td t;
  td_init(&t);
  td_set(&t, "drain_timeout_s=1");
  td_start(&t);
  char a[80], line[160];
  snprintf(a, sizeof a, "%s", td_submit(&t, td_jobfile("plan.yaml", 40, 20, NULL), "--set device.plan=true"));
  snprintf(line, sizeof line, "job %s: RUNNING (started on cpu (attempt 1))", a);
  td_wait_log(&t, line, 0, 60);
  int st = td_stop(&t, SIGTERM, 60, NULL);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "traind exited with status %d", st);
  CHECK(td_log_count(&t, "drain: the running job did not checkpoint within 1 s") == 1,
        "the drain did not time out: the planner calibrated within a second? (see %s)", t.log);

  td_start(&t);
  Traind__V1__Job *j = td_wait_done(&t, a, 300);
  CHECK(j->state == TRAIND__V1__JOB_STATE__JOB_STATE_SUCCEEDED, "job %s ended %d: %s", a, j->state, j->error);
  CHECK(j->crashes == 0, "job %s counted %d crashes after a drain that timed out", a, j->crashes);
  printf("drain timed out; after the restart job %s was no crash and SUCCEEDED (attempt %d)\n", a, j->attempts);
  protobuf_c_message_free_unpacked(&j->base, NULL);
  td_finish(&t);
  return 0;
}
