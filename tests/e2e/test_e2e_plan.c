// The planner in the daemon: PlanJob (trainctl plan) shows the plan, its
// JSON and timeline, the largest batch that fits, and refuses a job that
// cannot fit naming the budget; a job submitted with device.plan runs the
// plan, which is stored with the job, and after a kill -9 and a restart the
// resumed job runs that same stored plan (it is not planned again). Each
// job shape is calibrated once, also across a restart: the daemon logs a
// line per calibration, which the test counts. A POET-X job (method poetx)
// is planned and runs its plan likewise.
#define _GNU_SOURCE
#include "e2e/daemon.h"

static const char CALIBRATED[] = "planning: calibrated this machine";

static int count(const char *s, const char *what) {
  int n = 0;
  for (const char *p = s; (p = strstr(p, what)); p++) n++;
  return n;
}

int main(void) {
  td t;
  td_init(&t);
  td_start(&t);
  const char *file = td_jobfile("plan.yaml", 120, 20, "");
  static char out[1 << 20];

  double t0 = td_now();
  CHECK(td_ctl(&t, out, sizeof out, "plan %s --set device.plan=true", file) == 0, "trainctl plan failed:\n%s", out);
  CHECK(strstr(out, "predicted step") && strstr(out, "boundary"), "no plan table:\n%s", out);
  double first = td_now() - t0;
  CHECK(td_log_count(&t, CALIBRATED) == 1, "the first plan made %d calibrations, not 1", td_log_count(&t, CALIBRATED));
  t0 = td_now();
  CHECK(td_ctl(&t, out, sizeof out, "plan %s --set device.plan=true --json", file) == 0, "plan --json failed");
  CHECK(strstr(out, "\"max_batch\"") && strstr(out, "\"timeline_svg\":\"<svg") && strstr(out, "\"plan\":\"{"),
        "PlanJob's JSON lacks the batch, timeline or plan:\n%.2000s", out);
  CHECK(td_log_count(&t, CALIBRATED) == 1, "the second plan of the same shape calibrated again");
  printf("trainctl plan: %.1f s the first time (calibrating this machine), %.2f s the second (no calibration)\n",
         first, td_now() - t0);

  // 1 MiB of device arena cannot hold two layer slots of the tiny model.
  int rc = td_ctl(&t, out, sizeof out, "plan %s --set device.plan=true --set device.memory_bytes=1048576 2>&1", file);
  CHECK(rc == 3 && strstr(out, "FAILED_PRECONDITION") && strstr(out, "does not fit") && strstr(out, "device"),
        "a job that cannot fit: exit %d:\n%s", rc, out);
  printf("refused: %s", out);

  char a[80];
  snprintf(a, sizeof a, "%s", td_submit(&t, file, "--set device.plan=true"));
  td_wait_step(&t, a, 50, 120);
  // GetTimeline: the last measured step, and the plan's predicted one.
  rc = td_ctl(&t, out, sizeof out, "timeline %s", a);
  CHECK(rc == 0 && !strncmp(out, "<svg", 4) && strstr(out, "(measured)") && strstr(out, ">F0 ") && strstr(out, ">B0 "),
        "trainctl timeline: exit %d, not a measured step:\n%.300s", rc, out);
  size_t measured = strlen(out);
  rc = td_ctl(&t, out, sizeof out, "timeline %s --predicted", a);
  CHECK(rc == 0 && !strncmp(out, "<svg", 4) && strstr(out, ">F0 ") && !strstr(out, "(measured)"),
        "trainctl timeline --predicted: exit %d:\n%.300s", rc, out);
  printf("trainctl timeline: %zu bytes of SVG measured, %zu predicted\n", measured, strlen(out));
  Traind__V1__Job *j = td_get(&t, a);
  CHECK(j && *j->plan, "the running job's record has no plan");
  char *plan = strdup(j->plan);
  protobuf_c_message_free_unpacked(&j->base, NULL);
  td_stop(&t, SIGKILL, 10, NULL);

  td_start(&t);
  j = td_wait_done(&t, a, 300);
  CHECK(j->state == TRAIND__V1__JOB_STATE__JOB_STATE_SUCCEEDED, "planned job ended %d: %s", j->state, j->error);
  CHECK(j->attempts == 2, "planned job started %d times, expected 2", j->attempts);
  CHECK(!strcmp(j->plan, plan), "the resumed job's plan changed");
  protobuf_c_message_free_unpacked(&j->base, NULL);
  // The resumed run measured its steps; its plan came from the record, so
  // there is no predicted drawing in this daemon's memory.
  CHECK(td_ctl(&t, out, sizeof out, "timeline %s", a) == 0 && strstr(out, "(measured)"),
        "no measured timeline after the resume");
  rc = td_ctl(&t, out, sizeof out, "timeline %s --predicted 2>&1", a);
  CHECK(rc == 3 && strstr(out, "no predicted step"), "timeline --predicted after the resume: exit %d: %s", rc, out);
  td_logs(&t, a, out, sizeof out);
  CHECK(count(out, "planned (") == 1, "the job was planned %d times:\n%s", count(out, "planned ("), out);
  const char *p = strstr(out, "planned (");
  printf("%.*s\n", (int)(strchr(p, '\n') - p), p);
  printf("killed and restarted: the job resumed with its stored plan and succeeded\n");

  // The calibration is kept in the state directory: a restarted daemon
  // plans the same shape without measuring again.
  char cmd[700];
  snprintf(cmd, sizeof cmd, "ls %s/profiles/cpu-*.json > /dev/null 2>&1", t.state);
  CHECK(system(cmd) == 0, "no calibrated profile under %s/profiles", t.state);
  int calibrations = td_log_count(&t, CALIBRATED);
  CHECK(td_ctl(&t, out, sizeof out, "plan %s --set device.plan=true", file) == 0, "plan after the restart failed");
  CHECK(td_log_count(&t, CALIBRATED) == calibrations, "planning after a restart calibrated again");
  printf("after the restart: planned from the stored calibration, none logged\n");

  // A POET-X job plans too: its shape is calibrated once more (the
  // rotations' rate at its block size), and it runs its plan to the end
  // through its merges.
  const char *poet = td_jobfile("poet.yaml", 30, 30, "");
  char b[80];
  snprintf(b, sizeof b, "%s",
           td_submit(&t, poet,
                     "--set device.plan=true --set training.method=poetx --set training.poet.block_size=16 "
                     "--set training.poet.merge_every=10"));
  j = td_wait_done(&t, b, 300);
  CHECK(j->state == TRAIND__V1__JOB_STATE__JOB_STATE_SUCCEEDED && *j->plan, "planned POET-X job ended %d: %s",
        j->state, j->error);
  protobuf_c_message_free_unpacked(&j->base, NULL);
  CHECK(td_log_count(&t, CALIBRATED) == calibrations + 1, "the POET-X job's shape made %d calibrations, not 1",
        td_log_count(&t, CALIBRATED) - calibrations);
  td_logs(&t, b, out, sizeof out);
  CHECK(count(out, "planned (") == 1, "the POET-X job was planned %d times:\n%s", count(out, "planned ("), out);
  p = strstr(out, "planned (");
  printf("POET-X job: %.*s; succeeded\n", (int)(strchr(p, '\n') - p), p);
  free(plan);
  td_finish(&t);
  return 0;
}
