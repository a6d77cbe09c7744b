// Scheduling against a real daemon: priority then first come first served;
// a job submitted with preempt checkpoints and requeues a running job of
// lower priority, which later resumes from that checkpoint; cancel of a
// queued job (at once) and of a running one (within the step in flight, by
// the steps its events name); retention of finished jobs by count and by
// age; SIGHUP rereads the config file; a job's threads run at runner_nice
// (runner_idle = 0), or SCHED_IDLE (the default), the daemon's own at its
// niceness and policy.
#define _GNU_SOURCE
#include <dirent.h>
#include <sched.h>

#include "e2e/daemon.h"

#define K(x) TRAIND__V1__##x

static td t;

static Traind__V1__Job *get(const char *id) {
  Traind__V1__Job *j = td_get(&t, id);
  CHECK(j, "job %s is gone", id);
  return j;
}

static int64_t started(const char *id) {
  Traind__V1__Job *j = get(id);
  int64_t s = j->started_ms;
  protobuf_c_message_free_unpacked(&j->base, NULL);
  return s;
}

// The step number after `what` in a job's events; -1 when it is not there.
static long step_in(const char *logs, const char *what) {
  const char *s = strstr(logs, what);
  return s ? atol(s + strlen(what)) : -1;
}

static void wait_state(const char *id, int state, double timeout_s) {
  double t0 = td_now();
  for (;;) {
    Traind__V1__Job *j = get(id);
    int s = j->state;
    protobuf_c_message_free_unpacked(&j->base, NULL);
    if (s == state) return;
    CHECK(td_now() - t0 < timeout_s, "job %s did not reach state %d within %.0f s (it is %d)", id, state, timeout_s, s);
    usleep(2000);
  }
}

// Fields of /proc/PID/task/TID/stat.
enum { F_NICE = 19, F_POLICY = 41 };

// Counts the daemon's threads named name (a prefix) whose stat field holds
// value and those whose field holds another.
static void threads_at(const char *name, int field_no, int value, int *at, int *other) {
  char path[512], comm[64], stat[1024];
  *at = *other = 0;
  snprintf(path, sizeof path, "/proc/%d/task", (int)t.pid);
  DIR *dir = opendir(path);
  CHECK(dir, "opendir %s", path);
  for (struct dirent *e; (e = readdir(dir));) {
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "/proc/%d/task/%s/comm", (int)t.pid, e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue; // the thread ended
    int ok = fgets(comm, sizeof comm, f) != NULL;
    fclose(f);
    if (!ok || strncmp(comm, name, strlen(name))) continue;
    snprintf(path, sizeof path, "/proc/%d/task/%s/stat", (int)t.pid, e->d_name);
    if (!(f = fopen(path, "r"))) continue;
    ok = fgets(stat, sizeof stat, f) != NULL;
    fclose(f);
    // comm (field 2) ends at the last ')'.
    const char *p = ok ? strrchr(stat, ')') : NULL;
    int field = 2, n = 0;
    for (; p && *p && field < field_no; p++)
      if (*p == ' ') field++;
    CHECK(p && sscanf(p, "%d", &n) == 1, "no field %d in %s", field_no, path);
    if (n == value) ++*at;
    else ++*other;
  }
  closedir(dir);
}

// The running job's threads (the runner, the activation lanes, the weight
// copies) hold job_value in the stat field, the daemon's own threads
// own_value.
static void job_threads(int field, int job_value, int own_value, const char *what) {
  static const struct {
    const char *name;
    int n; // 0: one or more
  } threads[] = {{"traind-run", 1}, {"traind-lane", 4}, {"traind-copy-", 2},
                 {"traind-cq", 0},  {"traind-commit", 0}, {"traind-store-io", 0}};
  for (size_t i = 0; i < sizeof threads / sizeof *threads; i++) {
    int want = i < 3 ? job_value : own_value, at, other;
    threads_at(threads[i].name, field, want, &at, &other);
    CHECK((threads[i].n ? at == threads[i].n : at >= 1) && other == 0, "%s threads at %s %d: %d, at others: %d",
          threads[i].name, what, want, at, other);
  }
}

int main(void) {
  td_init(&t);
  td_set(&t, "retention_jobs=5");
  td_set(&t, "runner_nice=7");
  FILE *f = fopen(t.conf, "a");
  CHECK(f, "cannot append to %s", t.conf);
  fprintf(f, "runner_idle = 0\n");
  fclose(f);
  td_start(&t);
  const char *lng = td_jobfile("long.yaml", 1000000, 25, NULL);
  const char *shrt = td_jobfile("short.yaml", 5, 5, NULL);
  char a[80], b[80], c[80], d[80], e[80], p[80];
  snprintf(a, sizeof a, "%s", td_submit(&t, lng, NULL));
  td_wait_step(&t, a, 30, 60);

  // The runner and the engine's threads it started (copy lanes, optimizer)
  // run at runner_nice, not SCHED_IDLE (runner_idle = 0 in the file); the
  // loop, the gRPC and the commit threads at neither.
  job_threads(F_NICE, 7, 0, "niceness");
  job_threads(F_POLICY, SCHED_OTHER, SCHED_OTHER, "policy");
  printf("runner_idle = 0: a running job's threads at niceness 7, the daemon's at 0, all SCHED_OTHER\n");
  snprintf(b, sizeof b, "%s", td_submit(&t, shrt, "--priority 0"));
  snprintf(c, sizeof c, "%s", td_submit(&t, shrt, "--priority 5"));
  snprintf(d, sizeof d, "%s", td_submit(&t, shrt, "--priority 0"));
  snprintf(e, sizeof e, "%s", td_submit(&t, shrt, "--priority -1"));

  // Cancel a queued job: done by the time the call returns.
  CHECK(td_ctl(&t, NULL, 0, "cancel %s", e) == 0, "cancel queued %s", e);
  Traind__V1__Job *je = get(e);
  CHECK(je->state == K(JOB_STATE__JOB_STATE_CANCELLED), "a cancelled queued job is in state %d", je->state);
  protobuf_c_message_free_unpacked(&je->base, NULL);

  // Preempt: A (priority 0) checkpoints and goes back to the queue.
  snprintf(p, sizeof p, "%s", td_submit(&t, shrt, "--priority 10 --preempt"));
  Traind__V1__Job *jp = td_wait_done(&t, p, 60);
  CHECK(jp->state == K(JOB_STATE__JOB_STATE_SUCCEEDED), "preempting job ended %d", jp->state);
  protobuf_c_message_free_unpacked(&jp->base, NULL);
  char logs[1 << 17];
  td_logs(&t, a, logs, sizeof logs);
  CHECK(strstr(logs, "QUEUED: preempted by job"), "A was not requeued by the preemption:\n%.2000s", logs);

  // C (priority 5) runs before A resumes; A resumes from its checkpoint.
  wait_state(c, K(JOB_STATE__JOB_STATE_SUCCEEDED), 60);
  wait_state(a, K(JOB_STATE__JOB_STATE_RUNNING), 60);
  Traind__V1__Job *ja = get(a);
  CHECK(ja->attempts == 2, "A started %d times", ja->attempts);
  protobuf_c_message_free_unpacked(&ja->base, NULL);
  // Its progress still shows attempt 1's step until attempt 2 logs where it
  // resumed: wait for that line, not for a step count.
  double t0 = td_now();
  for (td_logs(&t, a, logs, sizeof logs); !strstr(logs, "resumed from the checkpoint at step ");
       td_logs(&t, a, logs, sizeof logs)) {
    CHECK(td_now() - t0 < 60, "A logged no resume within 60 s of running again");
    usleep(5000);
  }
  CHECK(step_in(logs, "resumed from the checkpoint at step ") >= 30, "A did not resume from the preemption's "
        "checkpoint:\n%.3000s", logs);

  // Cancel the running A: the engine abandons the step in flight at its
  // next layer, so A ends at most one step after the one it had done when
  // the cancel came (both steps are in its events).
  CHECK(td_ctl(&t, NULL, 0, "cancel %s", a) == 0, "cancel running %s", a);
  wait_state(a, K(JOB_STATE__JOB_STATE_CANCELLED), 60);
  td_logs(&t, a, logs, sizeof logs);
  long at = step_in(logs, "cancel requested after step "), last = step_in(logs, "cancelled while running, after step ");
  CHECK(at >= 30 && last >= at && last <= at + 1, "cancel requested after step %ld, A stopped after step %ld "
        "(-1: not in its events):\n%s", at, last, logs);
  printf("preempted and resumed; cancel requested after step %ld, the job stopped after step %ld\n", at, last);

  // B then D (same priority, submission order).
  wait_state(d, K(JOB_STATE__JOB_STATE_SUCCEEDED), 60);
  wait_state(b, K(JOB_STATE__JOB_STATE_SUCCEEDED), 60);
  CHECK(started(p) < started(c) && started(c) < started(b) && started(b) <= started(d),
        "order: P %lld, C %lld, B %lld, D %lld", (long long)started(p), (long long)started(c), (long long)started(b),
        (long long)started(d));
  printf("order: preempting job, then priority 5, then priority 0 in submission order\n");

  // Retention: 6 finished jobs, 5 kept; the oldest (A) is gone.
  CHECK(td_get(&t, a) == NULL, "retention kept the oldest finished job");
  Traind__V1__Job *jb = get(b);
  protobuf_c_message_free_unpacked(&jb->base, NULL);
  printf("retention: the 5 newest finished jobs kept\n");

  // SIGHUP: a new default checkpoint interval applies to the next job, and
  // runner_idle, no longer in the file, is back to its default.
  f = fopen(t.conf, "w");
  fprintf(f, "checkpoint_every = 3\n");
  fclose(f);
  td_reload(&t);
  char id[80];
  snprintf(id, sizeof id, "%s", td_submit(&t, shrt, "--steps 7 --checkpoint-every 0"));
  wait_state(id, K(JOB_STATE__JOB_STATE_SUCCEEDED), 60);
  td_logs(&t, id, logs, sizeof logs);
  CHECK(strstr(logs, "checkpoint at step 3") && strstr(logs, "checkpoint at step 6") && strstr(logs, "checkpoint at step 7"),
        "the reloaded checkpoint_every did not apply:\n%s", logs);
  printf("SIGHUP: checkpoint_every = 3 applied to the next job\n");
  char idle[80];
  snprintf(idle, sizeof idle, "%s", td_submit(&t, lng, NULL));
  td_wait_step(&t, idle, 2, 60);
  job_threads(F_POLICY, SCHED_IDLE, SCHED_OTHER, "policy");
  CHECK(td_ctl(&t, NULL, 0, "cancel %s", idle) == 0, "cancel running %s", idle);
  wait_state(idle, K(JOB_STATE__JOB_STATE_CANCELLED), 60);
  printf("runner_idle by default: a running job's threads SCHED_IDLE, the daemon's SCHED_OTHER\n");

  // Retention by age: every job has been finished for over a second (a
  // sleep only ever lasts longer) when a reload sets retention_age_s = 1,
  // and the reload runs retention before it serves another call.
  usleep(1100000);
  f = fopen(t.conf, "w");
  fprintf(f, "checkpoint_every = 3\nretention_age_s = 1\n");
  fclose(f);
  td_reload(&t);
  const char *gone[] = {b, c, d, p, id};
  for (size_t i = 0; i < sizeof gone / sizeof *gone; i++)
    CHECK(td_get(&t, gone[i]) == NULL, "retention_age_s = 1 kept job %s", gone[i]);
  printf("retention: jobs finished over 1 s ago removed after retention_age_s = 1\n");
  td_finish(&t);
  return 0;
}
