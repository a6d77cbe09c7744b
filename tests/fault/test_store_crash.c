// Crash safety of checkpoints: a child process trains the tiny model,
// saving a checkpoint through the store every few steps, and dies by
// SIGKILL, at random moments (40 times) and at fault points inside
// the commit (between shards, after the last shard, before and after the
// manifest; the store's TRAIND_STORE_FAULT hook raises SIGKILL there). After
// every death the parent opens the store and checks that it lists only
// complete checkpoints whose every shard passes its crc32c, that the
// checkpoint being written when the child died exists exactly when its
// manifest was written, and that the job's last-checkpoint field names the
// newest one. The next child resumes from it; every loss any child reports
// must equal, bit for bit, the loss of an uninterrupted run computed by the
// parent first.
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "storage/store.h"
#include "tiny.h"
#include "unit/tmpdir.h"

enum { STEPS = 30, SAVE_EVERY = 3, KEEP = 2, RANDOM_KILLS = 40 };
// Pieces of one checkpoint of the tiny config: meta, the compute tally, the
// weights of its 4 layout shards, and one optimizer region per tensor (the
// embedding, 2 × 11 layer tensors, the final norm, lm_head).
enum { CKPT_SHARDS = 2 + 4 + 25 };
static const char JOB[] = "crash";

extern char **environ;
static eng_err e;

static void spec(eng_spec *s) {
  tiny_spec(s, 2);
  s->total_steps = STEPS;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

// ---- the child ---------------------------------------------------------------------
// Appends one line per event to the log with a single write(), so a kill
// leaves whole lines: "R <step>" resumed at, "L <step> <loss bits>" per
// step, "S <step>" before a save, "C <step>" after it, "D" at the end.
static int log_fd;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
  char line[128];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  CHECK(write(log_fd, line, (size_t)n) == n, "cannot write the log");
}

static int child(const char *dir, const char *log) {
  log_fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
  CHECK(log_fd >= 0, "cannot open %s", log);
  store *st;
  CHECK_OK(store_open(&st, dir, NULL, &e), &e);
  eng_store es;
  CHECK_OK(store_engine_open(&es, st, JOB, KEEP, &e), &e);
  eng_spec s;
  spec(&s);
  eng_run *r;
  CHECK_OK(eng_open(&s, &r, &e), &e);
  int rc = eng_load(r, &es, &e);
  CHECK(rc == 0 || rc == 1, "resume failed: %s", e.msg);
  say("R %lld\n", (long long)eng_steps_done(r));
  while (eng_steps_done(r) < STEPS) {
    eng_metrics m;
    CHECK_OK(eng_step(r, &m, &e), &e);
    uint64_t bits;
    memcpy(&bits, &m.loss, sizeof bits);
    say("L %lld %016" PRIx64 "\n", (long long)m.step, bits);
    if (m.step % SAVE_EVERY == 0) {
      say("S %lld\n", (long long)m.step);
      CHECK_OK(eng_save(r, &es, &e), &e);
      say("C %lld\n", (long long)m.step);
    }
  }
  say("D\n");
  eng_close(r);
  es.close(es.ctx);
  store_close(st);
  return 0;
}

// ---- the parent ---------------------------------------------------------------------
static double ref[STEPS + 1]; // ref[k]: the loss of step k (1-based), uninterrupted

static void reference(void) {
  eng_spec s;
  spec(&s);
  eng_run *r;
  CHECK_OK(eng_open(&s, &r, &e), &e);
  for (int k = 1; k <= STEPS; k++) {
    eng_metrics m;
    CHECK_OK(eng_step(r, &m, &e), &e);
    ref[k] = m.loss;
  }
  eng_close(r);
}

typedef struct outcome {
  int killed;         // died of SIGKILL
  int done;           // reached the last step
  long long resumed;  // R
  long long saving;   // the step of an S without its C, -1 when none
  int losses;         // L lines checked
} outcome;

// Checks the child's log against the reference.
static outcome read_log(const char *log) {
  outcome o = {.resumed = -1, .saving = -1};
  FILE *f = fopen(log, "r");
  if (!f && errno == ENOENT) return o; // killed before it opened the log
  CHECK(f, "cannot read %s", log);
  char line[128];
  while (fgets(line, sizeof line, f)) {
    long long step;
    uint64_t bits;
    if (sscanf(line, "R %lld", &step) == 1) o.resumed = step;
    if (sscanf(line, "S %lld", &step) == 1) o.saving = step;
    if (sscanf(line, "C %lld", &step) == 1) o.saving = -1;
    if (!strcmp(line, "D\n")) o.done = 1;
    if (sscanf(line, "L %lld %" SCNx64, &step, &bits) == 2) {
      double loss;
      memcpy(&loss, &bits, sizeof loss);
      CHECK(step >= 1 && step <= STEPS && loss == ref[step], "step %lld: loss %.17g, the uninterrupted run had "
            "%.17g", step, loss, ref[step]);
      o.losses++;
    }
  }
  fclose(f);
  return o;
}

// Starts a child with TRAIND_STORE_FAULT=fault (when not NULL), kills it
// after delay seconds (when >= 0), and reaps it. *started (when not NULL)
// gets the time its first log line appeared: the start-up before training.
static outcome run_child(const char *self, const char *dir, const char *log, const char *fault, double delay,
                         double *started) {
  static char fault_env[64];
  char *envp[256];
  int n = 0;
  for (char **v = environ; *v && n < 254; v++)
    if (strncmp(*v, "TRAIND_STORE_FAULT=", 19)) envp[n++] = *v;
  if (fault) {
    snprintf(fault_env, sizeof fault_env, "TRAIND_STORE_FAULT=%s", fault);
    envp[n++] = fault_env;
  }
  envp[n] = NULL;
  unlink(log);
  double t0 = now();
  pid_t pid = fork();
  CHECK(pid >= 0, "fork failed");
  if (pid == 0) {
    char *args[] = {(char *)self, "--child", (char *)dir, (char *)log, NULL};
    execve(self, args, envp);
    _exit(127);
  }
  int status;
  pid_t w;
  while ((w = waitpid(pid, &status, WNOHANG)) == 0) {
    struct stat sb;
    if (started && *started < 0 && stat(log, &sb) == 0 && sb.st_size > 0) *started = now() - t0;
    if (delay >= 0 && now() - t0 >= delay) {
      kill(pid, SIGKILL);
      CHECK((w = waitpid(pid, &status, 0)) == pid, "waitpid failed");
      break;
    }
    nanosleep(&(struct timespec){0, 200000}, NULL);
  }
  CHECK(w == pid, "waitpid failed");
  CHECK(WIFEXITED(status) ? WEXITSTATUS(status) == 0 : WTERMSIG(status) == SIGKILL,
        "the child failed (status %d)", status);
  outcome o = read_log(log);
  o.killed = WIFSIGNALED(status);
  return o;
}

// What the store shows after a death: only complete, verified checkpoints,
// at most KEEP of them, the newest named by the last-checkpoint field.
// Returns the newest step (0 when none).
static int64_t check_store(const char *dir, const outcome *o, int manifest_written) {
  store *st;
  CHECK_OK(store_open(&st, dir, NULL, &e), &e);
  int64_t steps[16], latest = 0;
  int n;
  CHECK_OK(store_ckpt_list(st, JOB, steps, 16, &n, &e), &e);
  CHECK(n <= KEEP + 1, "%d checkpoints listed (keep %d, plus one committed just before its keep ran)", n, KEEP);
  for (int i = 0; i < n; i++) {
    int shards;
    CHECK_OK(store_ckpt_verify(st, JOB, steps[i], &shards, &e), &e);
    CHECK(shards == CKPT_SHARDS, "checkpoint at step %" PRId64 " has %d shards, expected %d", steps[i], shards, CKPT_SHARDS);
  }
  int rc = store_ckpt_latest(st, JOB, &latest, &e);
  CHECK(rc == (n ? 0 : 1), "the last-checkpoint field and the list disagree: %s", e.msg);
  if (n) CHECK(latest == steps[n - 1], "last checkpoint %" PRId64 ", newest listed %" PRId64, latest, steps[n - 1]);
  if (o->saving >= 0) {
    int listed = 0;
    for (int i = 0; i < n; i++) listed |= steps[i] == o->saving;
    CHECK(listed == manifest_written, "the checkpoint being saved at step %lld is %s after the kill", o->saving,
          listed ? "listed" : "missing");
  }
  store_close(st);
  return n ? latest : 0;
}

int main(int argc, char **argv) {
  if (argc == 4 && !strcmp(argv[1], "--child")) return child(argv[2], argv[3]);
  tmp_make();
  const char *dir = tmp_path("db"), *log = tmp_path("child.log");
  reference();

  // An uninterrupted child: the reference again, through the store, and its duration.
  double t0 = now(), startup = -1;
  outcome o = run_child(argv[0], dir, log, NULL, -1, &startup);
  double full = now() - t0;
  CHECK(o.done && o.losses == STEPS, "an uninterrupted child should train all %d steps (%d)", STEPS, o.losses);
  check_store(dir, &o, 0);
  printf("uninterrupted child: %.2f s to start, %d steps in %.2f s in all, losses identical to the parent's "
         "run\n", startup, STEPS, full);

  // Fault points inside the commit: the child kills itself there. A
  // checkpoint has CKPT_SHARDS shards (meta, the compute tally, then of each of the 4 layout
  // shards its weights and each of its tensors' optimizer state); the
  // n-th hit of a point is in the n-th save of that child.
  static const struct {
    const char *fault;
    int manifest;
  } faults[] = {
      {"ckpt_put:1", 0},  {"ckpt_put:7", 0},      {"ckpt_put:30", 0},    {"ckpt_put:20", 0},
      {"ckpt_flush:1", 0}, {"ckpt_manifest:1", 0}, {"ckpt_manifest:2", 0}, {"ckpt_done:1", 1},
      {"ckpt_done:3", 1},
  };
  int nf = (int)(sizeof faults / sizeof *faults), verified_runs = 0;
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK(system(cmd) == 0, "cannot remove %s", dir);
  int64_t latest = 0;
  for (int i = 0; i < nf; i++) {
    o = run_child(argv[0], dir, log, faults[i].fault, -1, NULL);
    CHECK(o.killed, "fault point %s did not fire", faults[i].fault);
    CHECK(o.resumed == latest, "resumed at step %lld, the newest checkpoint was %" PRId64, o.resumed, latest);
    CHECK(o.saving >= 0, "fault point %s fired outside a save", faults[i].fault);
    latest = check_store(dir, &o, faults[i].manifest);
    verified_runs++;
    printf("killed at %-16s while saving step %3lld: resumed from %lld, newest checkpoint now %" PRId64 "\n",
           faults[i].fault, o.saving, o.resumed, latest);
  }

  // Random kills; a child that finishes first starts the job over.
  unsigned seed = 20261202;
  int kills = 0, in_save = 0, finished = 0, losses = 0;
  while (kills < RANDOM_KILLS) {
    // One kill in five during start-up (opening the store collects what
    // the last kill left), the rest uniform over the training left to do.
    double u = (double)rand_r(&seed) / RAND_MAX, delay;
    if (rand_r(&seed) % 5 == 0) delay = startup * u;
    else delay = startup + (full - startup) * u * (double)(STEPS - latest) / STEPS;
    o = run_child(argv[0], dir, log, NULL, delay, NULL);
    CHECK(o.resumed == latest || o.resumed == -1, "resumed at step %lld, the newest checkpoint was %" PRId64,
          o.resumed, latest);
    losses += o.losses;
    if (o.killed) {
      kills++;
      in_save += o.saving >= 0;
      // A kill between S and C may fall before or after the manifest:
      // check_store accepts either, as long as what is listed verifies.
      o.saving = -1;
    }
    latest = check_store(dir, &o, 0);
    verified_runs++;
    if (o.done) {
      finished++;
      CHECK(system(cmd) == 0, "cannot remove %s", dir);
      latest = 0;
    }
  }
  o = run_child(argv[0], dir, log, NULL, -1, NULL);
  CHECK(o.done, "the last child should finish");
  losses += o.losses;
  printf("%d random SIGKILLs (%d inside a save), %d children finished, %d store checks, %d losses compared, "
         "all bit-identical to the uninterrupted run\n", kills, in_save, finished + 1, verified_runs + 1,
         losses);
  tmp_cleanup();
  return 0;
}
