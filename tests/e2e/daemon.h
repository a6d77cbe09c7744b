// The e2e tests' harness: a real traind forked on a real Unix socket in a
// private temporary directory, readiness taken from its sd_notify READY=1
// (the tests own the NOTIFY_SOCKET), trainctl run as a process, and the
// client library for calls that trainctl does not make. The binaries are
// found next to the test's own: <build>/daemon/traind, <build>/client/trainctl.
// The including file defines _GNU_SOURCE before its first #include.
#ifndef TESTS_E2E_DAEMON_H
#define TESTS_E2E_DAEMON_H

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "rpc.h"
#include "traind/v1/traind.pb-c.h"
#include "unit/tmpdir.h"

typedef struct td td;
static td *td_current; // killed at exit, so that a failed CHECK leaves no daemon behind

struct td {
  pid_t pid;
  char bin_traind[1024], bin_trainctl[1024];
  char state[512], sock[600], log[600], conf[600];
  char extra[8][256]; // more daemon arguments
  int n_extra;
  int nofile;           // RLIMIT_NOFILE of the daemon (0: inherited)
  int roots_in_conf;  // 1: no --data-root flags; the data roots are the config file's (for reload tests)
  // The NOTIFY_SOCKET, read all the time by a thread: sd_notify blocks when
  // the receiver's queue is full, as systemd never lets it be.
  int notify_fd;
  pthread_t notify_th;
  pthread_mutex_t notify_lock;
  int ready, watchdogs;
  char status[512];     // the last STATUS= line
  rpc *r;
};

static inline double td_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void td_atexit(void) {
  if (td_current && td_current->pid > 0) {
    kill(td_current->pid, SIGKILL);
    waitpid(td_current->pid, NULL, 0);
  }
}

// The build directory: the test's own binary is <build>/tests/<name>.
static inline const char *td_build_dir(void) {
  static char exe[1024];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  CHECK(n > 0, "cannot read /proc/self/exe");
  exe[n] = 0;
  return dirname(dirname(exe));
}

// Binaries, the state directory and the data root (<tmp>/data).
static inline void td_init(td *t) {
  memset(t, 0, sizeof *t);
  td_current = t;
  atexit(td_atexit);
  const char *build = td_build_dir();
  snprintf(t->bin_traind, sizeof t->bin_traind, "%s/daemon/traind", build);
  snprintf(t->bin_trainctl, sizeof t->bin_trainctl, "%s/client/trainctl", build);
  CHECK(access(t->bin_traind, X_OK) == 0, "%s is not built", t->bin_traind);
  CHECK(access(t->bin_trainctl, X_OK) == 0, "%s is not built", t->bin_trainctl);
  tmp_make();
  snprintf(t->state, sizeof t->state, "%s/state", tmp_root);
  snprintf(t->sock, sizeof t->sock, "%s/traind.sock", t->state);
  snprintf(t->log, sizeof t->log, "%s/traind.log", tmp_root);
  // An empty config file that a test may fill and SIGHUP the daemon to reread.
  snprintf(t->conf, sizeof t->conf, "%s/traind.conf", tmp_root);
  FILE *f = fopen(t->conf, "w");
  CHECK(f, "cannot write %s", t->conf);
  fclose(f);
  CHECK(mkdir(tmp_path("data"), 0755) == 0, "mkdir data");
}

static inline void td_arg(td *t, const char *arg) {
  CHECK(t->n_extra < 8, "too many extra arguments");
  snprintf(t->extra[t->n_extra++], sizeof t->extra[0], "%s", arg);
}

// One config key for the daemon's command line: --set KEY=VALUE.
static inline void td_set(td *t, const char *key_value) {
  td_arg(t, "--set");
  td_arg(t, key_value);
}

static void *td_notify_reader(void *arg) {
  td *t = arg;
  char buf[1024];
  for (;;) {
    ssize_t n = recv(t->notify_fd, buf, sizeof buf - 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return NULL; // shut down by td_stop
    buf[n] = 0;
    pthread_mutex_lock(&t->notify_lock);
    if (strstr(buf, "READY=1")) t->ready = 1;
    if (strstr(buf, "WATCHDOG=1")) t->watchdogs++;
    const char *st = strstr(buf, "STATUS=");
    if (st) snprintf(t->status, sizeof t->status, "%.*s", (int)strcspn(st + 7, "\n"), st + 7);
    pthread_mutex_unlock(&t->notify_lock);
  }
}

// Adds the model fixtures (tests/fixtures) as a data root, before td_start.
static inline void td_root_fixtures(td *t) {
  td_arg(t, "--data-root");
  td_arg(t, TRAIND_SOURCE_DIR "/tests/fixtures");
}

// Starts the daemon and waits (up to 30 s) for READY=1.
static inline void td_start(td *t) {
  char nsock[600];
  snprintf(nsock, sizeof nsock, "%s/notify.sock", tmp_root);
  unlink(nsock);
  int ns = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  CHECK(strlen(nsock) < sizeof sa.sun_path, "%s: too long for a socket path", nsock);
  memcpy(sa.sun_path, nsock, strlen(nsock) + 1);
  CHECK(bind(ns, (struct sockaddr *)&sa, sizeof sa) == 0, "bind %s: %s", nsock, strerror(errno));
  t->pid = fork();
  CHECK(t->pid >= 0, "fork");
  if (t->pid == 0) {
    // Dies with the test, even when ctest kills the test on a timeout.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    // Not the test's stdout: ctest waits for every holder of its pipe.
    int fd = open(t->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    setenv("NOTIFY_SOCKET", nsock, 1);
    setenv("WATCHDOG_USEC", "400000", 1); // pings every 200 ms
    setenv("OMP_NUM_THREADS", "1", 1);
    if (t->nofile) setrlimit(RLIMIT_NOFILE, &(struct rlimit){(rlim_t)t->nofile, (rlim_t)t->nofile});
    char data[600], src[1100];
    snprintf(data, sizeof data, "%s/data", tmp_root);
    snprintf(src, sizeof src, "%s/data", TRAIND_SOURCE_DIR);
    char *argv[32] = {t->bin_traind, "--config", t->conf, "--state-dir", t->state, "--set", "metrics_interval_ms=0",
                      "--data-root", data, "--data-root", src};
    int k = t->roots_in_conf ? 7 : 11;
    for (int i = 0; i < t->n_extra; i++) argv[k++] = t->extra[i];
    argv[k] = NULL;
    execv(t->bin_traind, argv);
    _exit(127);
  }
  t->ready = 0;
  t->notify_fd = ns;
  pthread_mutex_init(&t->notify_lock, NULL);
  CHECK(pthread_create(&t->notify_th, NULL, td_notify_reader, t) == 0, "pthread_create");
  double t0 = td_now();
  int ready = 0;
  while (!ready && td_now() - t0 < 30) {
    usleep(10000);
    pthread_mutex_lock(&t->notify_lock);
    ready = t->ready;
    pthread_mutex_unlock(&t->notify_lock);
    int st;
    CHECK(waitpid(t->pid, &st, WNOHANG) == 0, "traind exited during startup (see %s)", t->log);
  }
  CHECK(ready, "traind did not report READY=1 within 30 s (see %s)", t->log);
  // A fresh channel: one that saw the previous daemon die fails its next call.
  rpc_close(t->r);
  {
    char err[256];
    CHECK(rpc_open(&t->r, t->sock, NULL, err, sizeof err) == 0, "rpc_open: %s", err);
  }
}

// Watchdog pings seen so far, and the last STATUS= (copied into buf).
static inline int td_notified(td *t, char *status, size_t n) {
  pthread_mutex_lock(&t->notify_lock);
  int w = t->watchdogs;
  snprintf(status, n, "%s", t->status);
  pthread_mutex_unlock(&t->notify_lock);
  return w;
}

// Waits (up to timeout_s) for at least `pings` WATCHDOG=1 since READY and a
// last STATUS= that contains `status`: the daemon sends them from its loop
// on its own schedule.
static inline void td_wait_notified(td *t, int pings, const char *status, double timeout_s) {
  double t0 = td_now();
  char last[512];
  int w;
  while ((w = td_notified(t, last, sizeof last)) < pings || !strstr(last, status)) {
    CHECK(td_now() - t0 < timeout_s, "after %.0f s: %d WATCHDOG=1 since READY (waiting for %d), STATUS=%s (waiting "
          "for \"%s\")", timeout_s, w, pings, last, status);
    usleep(10000);
  }
}

// Lines of the daemon's log (every daemon this test started) that contain needle.
static inline int td_log_count(td *t, const char *needle) {
  FILE *f = fopen(t->log, "r");
  if (!f) return 0;
  char *line = NULL;
  size_t cap = 0;
  int n = 0;
  while (getline(&line, &cap, f) > 0) n += strstr(line, needle) != NULL;
  free(line);
  fclose(f);
  return n;
}

// Waits (up to timeout_s) until more than `seen` lines of the log contain needle.
static inline void td_wait_log(td *t, const char *needle, int seen, double timeout_s) {
  double t0 = td_now();
  while (td_log_count(t, needle) <= seen) {
    CHECK(td_now() - t0 < timeout_s, "traind did not log \"%s\" within %.0f s (see %s)", needle, timeout_s, t->log);
    usleep(10000);
  }
}

// SIGHUP, then waits for the line the loop thread logs while it reloads:
// every call the test makes after that is served once the reload (and the
// retention run it ends with) is done, on the new config.
static inline void td_reload(td *t) {
  static const char done[] = "SIGHUP: config reloaded";
  int seen = td_log_count(t, done);
  kill(t->pid, SIGHUP);
  td_wait_log(t, done, seen, 60);
}

// Sends sig and waits for the exit; returns the wait status.
static inline int td_stop(td *t, int sig, double timeout_s, double *took) {
  double t0 = td_now();
  kill(t->pid, sig);
  int st = 0;
  for (;;) {
    pid_t w = waitpid(t->pid, &st, WNOHANG);
    if (w == t->pid) break;
    if (td_now() - t0 > timeout_s) {
      kill(t->pid, SIGKILL);
      waitpid(t->pid, &st, 0);
      CHECK(0, "traind did not exit within %.0f s of signal %d", timeout_s, sig);
    }
    usleep(10000);
  }
  if (took) *took = td_now() - t0;
  t->pid = 0;
  shutdown(t->notify_fd, SHUT_RDWR);
  pthread_join(t->notify_th, NULL);
  close(t->notify_fd);
  return st;
}

// Runs a shell command line; its output (stdout and what it sends to
// stderr) into out, its exit code returned.
static inline int td_run_out(const char *cmd, char *out, size_t n) {
  FILE *p = popen(cmd, "r");
  CHECK(p, "popen %s", cmd);
  size_t k = fread(out, 1, n - 1, p);
  out[k] = 0;
  int st = pclose(p);
  CHECK(WIFEXITED(st), "%s did not exit normally", cmd);
  return WEXITSTATUS(st);
}

// Runs trainctl with TRAIND_ADDR set; its stdout goes into out (may be
// NULL). Returns its exit code.
static inline int td_ctl(td *t, char *out, size_t outlen, const char *fmt, ...) {
  char args[4096], cmd[6000];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  snprintf(cmd, sizeof cmd, "TRAIND_ADDR=%s %s %s", t->sock, t->bin_trainctl, args);
  FILE *p = popen(cmd, "r");
  CHECK(p, "popen %s", cmd);
  size_t n = 0;
  char sink[4096];
  // Read to the end, what does not fit out included: a trainctl that
  // cannot write its output fails.
  for (size_t k = 1; k;) {
    int room = out && n < outlen - 1;
    k = room ? fread(out + n, 1, outlen - 1 - n, p) : fread(sink, 1, sizeof sink, p);
    if (room) n += k;
  }
  if (out) out[n] = 0;
  int st = pclose(p);
  CHECK(WIFEXITED(st), "trainctl %s did not exit normally", args);
  return WEXITSTATUS(st);
}

// Runs a shell command (a test's file setup: cp, ln, mkfifo); it must exit 0.
static inline void td_sh(const char *fmt, ...) {
  char cmd[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  CHECK(system(cmd) == 0, "%s failed", cmd);
}

// Writes n bytes to path (created or truncated).
static inline void td_write(const char *path, const void *bytes, size_t n) {
  FILE *f = fopen(path, "wb");
  CHECK(f && fwrite(bytes, 1, n, f) == n && fclose(f) == 0, "cannot write %s", path);
}

// A job file for the model section model (YAML, "model:\n  ...\n") on the
// data file train_path. The path stays valid for the next 7 calls
// (tmp_path's buffers rotate after 4).
static inline const char *td_jobfile_data(const char *name, const char *model, const char *train_path, int steps,
                                          int ckpt_every, const char *extra) {
  static char paths[8][512];
  static int k;
  char *path = paths[k++ & 7];
  snprintf(path, sizeof paths[0], "%s", tmp_path(name));
  FILE *f = fopen(path, "w");
  CHECK(f, "cannot write %s", path);
  fprintf(f,
          "name: %s\n%s"
          "data:\n  train_path: %s\n"
          "training:\n  steps: %d\n  batch_size: 4\n  seq_len: 64\n  lr: 3e-3\n  min_lr: 3e-4\n"
          "  warmup_steps: 5\n"
          "checkpoints:\n  every_steps: %d\n  keep: 2\n"
          "device:\n  memory_bytes: 256M\n"
          "seed: 42\n%s",
          name, model, train_path, steps, ckpt_every, extra ? extra : "");
  fclose(f);
  return path;
}

// td_jobfile_data on the demo text.
static inline const char *td_jobfile_model(const char *name, const char *model, int steps, int ckpt_every,
                                           const char *extra) {
  return td_jobfile_data(name, model, TRAIND_SOURCE_DIR "/data/demo/licenses.txt", steps, ckpt_every, extra);
}

// A job file <name>.yaml of `steps` steps (a checkpoint at the end) from the
// model directory dir, on train_path (NULL: the demo text).
static inline const char *td_jobfile_hf(const char *name, const char *dir, const char *train_path, int steps) {
  char file[64], model[600];
  snprintf(file, sizeof file, "%s.yaml", name);
  snprintf(model, sizeof model, "model:\n  hf_dir: %s\n", dir);
  return train_path ? td_jobfile_data(file, model, train_path, steps, steps, NULL)
                    : td_jobfile_model(file, model, steps, steps, NULL);
}

// The model section of the tests' tiny model (tests/tiny.h).
#define TD_TINY_MODEL                                                                                \
  "model:\n  config:\n    arch: qwen3\n    vocab_size: 256\n    hidden_size: 64\n"                     \
  "    num_hidden_layers: 2\n    num_attention_heads: 4\n    num_key_value_heads: 2\n"                 \
  "    head_dim: 16\n    intermediate_size: 176\n    max_position_embeddings: 512\n"

// A job file for the tests' tiny model.
static inline const char *td_jobfile(const char *name, int steps, int ckpt_every, const char *extra) {
  return td_jobfile_model(name, TD_TINY_MODEL, steps, ckpt_every, extra);
}

// GetJob through the client library (NULL when not found).
static inline Traind__V1__Job *td_get(td *t, const char *id) {
  Traind__V1__GetJobRequest req = TRAIND__V1__GET_JOB_REQUEST__INIT;
  req.job_id = (char *)id;
  ProtobufCMessage *reply;
  rpc_status st;
  int rc = rpc_unary(t->r, "/traind.v1.Trainer/GetJob", &req.base, &traind__v1__job__descriptor, &reply, 10000, &st);
  if (rc == GRPC_STATUS_NOT_FOUND) return NULL;
  CHECK(rc == 0, "GetJob %s: %s %s", id, rpc_code_name(st.code), st.msg);
  return (Traind__V1__Job *)reply;
}

// Waits until the job reaches a finished state; returns it.
static inline Traind__V1__Job *td_wait_done(td *t, const char *id, double timeout_s) {
  double t0 = td_now();
  for (;;) {
    Traind__V1__Job *j = td_get(t, id);
    CHECK(j, "job %s vanished", id);
    if (j->state == TRAIND__V1__JOB_STATE__JOB_STATE_SUCCEEDED || j->state == TRAIND__V1__JOB_STATE__JOB_STATE_FAILED ||
        j->state == TRAIND__V1__JOB_STATE__JOB_STATE_CANCELLED)
      return j;
    protobuf_c_message_free_unpacked(&j->base, NULL);
    CHECK(td_now() - t0 < timeout_s, "job %s did not finish within %.0f s", id, timeout_s);
    usleep(20000);
  }
}

// Waits until the job finishes, which it must do SUCCEEDED.
static inline void td_wait_success(td *t, const char *id, double timeout_s) {
  Traind__V1__Job *j = td_wait_done(t, id, timeout_s);
  CHECK(j->state == TRAIND__V1__JOB_STATE__JOB_STATE_SUCCEEDED, "job %s ended %d: %s", id, j->state, j->error);
  protobuf_c_message_free_unpacked(&j->base, NULL);
}

// Submits a job file with trainctl; returns the job id (static buffer).
static inline const char *td_submit(td *t, const char *jobfile, const char *flags) {
  static char id[80];
  char out[4096];
  int rc = td_ctl(t, out, sizeof out, "submit %s %s", jobfile, flags ? flags : "");
  CHECK(rc == 0, "trainctl submit %s exited %d", jobfile, rc);
  CHECK(sscanf(out, "%79s", id) == 1 && id[0] == 'j', "trainctl submit printed no job id: %s", out);
  return id;
}

// Submits a job file that may be refused: -1 when it is, with trainctl's
// output (stderr too) in msg; else waits for the job to finish and returns
// its state, with its error in msg.
static inline int td_submit_outcome(td *t, const char *jobfile, char *msg, size_t n, double timeout_s) {
  int rc = td_ctl(t, msg, n, "submit %s 2>&1", jobfile);
  if (rc) return -1;
  char id[80];
  CHECK(sscanf(msg, "%79s", id) == 1 && id[0] == 'j', "trainctl submit printed no job id: %s", msg);
  Traind__V1__Job *j = td_wait_done(t, id, timeout_s);
  int state = j->state;
  snprintf(msg, n, "%s", j->error);
  protobuf_c_message_free_unpacked(&j->base, NULL);
  return state;
}

// Submits a job file that the daemon must refuse with a message that
// contains want.
static inline void td_refused(td *t, const char *jobfile, const char *want) {
  char msg[4096];
  int st = td_submit_outcome(t, jobfile, msg, sizeof msg, 60);
  CHECK(st == -1 && strstr(msg, want), "%s: expected a refusal naming \"%s\", got state %d: %s", jobfile, want, st, msg);
}

// Waits until the job has done at least `step` steps.
static inline void td_wait_step(td *t, const char *id, int64_t step, double timeout_s) {
  double t0 = td_now();
  for (;;) {
    Traind__V1__Job *j = td_get(t, id);
    CHECK(j, "job %s vanished", id);
    int64_t s = j->progress ? j->progress->step : 0;
    int running = j->state == TRAIND__V1__JOB_STATE__JOB_STATE_RUNNING;
    protobuf_c_message_free_unpacked(&j->base, NULL);
    if (running && s >= step) return;
    CHECK(td_now() - t0 < timeout_s, "job %s did not reach step %lld within %.0f s", id, (long long)step, timeout_s);
    usleep(5000);
  }
}

// The text of every event of a job (trainctl logs), into out.
static inline void td_logs(td *t, const char *id, char *out, size_t n) {
  CHECK(td_ctl(t, out, n, "logs %s", id) == 0, "trainctl logs %s failed: %s", id, out);
}

// Stops the daemon (it must exit 0: under the sanitizers a leak or an error
// at exit would not), then removes the temporary directory.
static inline void td_finish(td *t) {
  if (t->pid) {
    int st = td_stop(t, SIGTERM, 60, NULL);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "traind exited with status %d on SIGTERM (see %s)", st, t->log);
  }
  rpc_close(t->r);
  t->r = NULL;
  tmp_cleanup();
}

// A fresh daemon that trained one short job (4 steps, a checkpoint every 2)
// to success and was then killed (SIGKILL): what it left behind is the
// test's to look at. The job's id into id.
static inline void td_ran_and_killed(td *t, const char *jobfile_name, char *id, size_t n) {
  td_init(t);
  td_start(t);
  snprintf(id, n, "%s", td_submit(t, td_jobfile(jobfile_name, 4, 2, NULL), NULL));
  td_wait_success(t, id, 120);
  td_stop(t, SIGKILL, 10, NULL);
}

#endif
