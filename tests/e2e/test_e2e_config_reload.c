// The config file against a real daemon whose data roots come from it: a
// directory given as the config is refused at start, by --check-config and
// on SIGHUP (the old config stays); a file caught empty at SIGHUP (no data
// root left) keeps the old config; a reload that takes a queued job's data
// root away holds the job in the queue (it runs after the root comes back)
// while a job whose own file is gone fails.
#define _GNU_SOURCE
#include "e2e/daemon.h"

#define K(x) TRAIND__V1__##x

static td t;

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  CHECK(f && fputs(text, f) >= 0 && fclose(f) == 0, "cannot write %s", path);
}

static void write_roots(int with_src) {
  char text[2048];
  snprintf(text, sizeof text, "data_root = %s/data\n%s%s%s", tmp_root, with_src ? "data_root = " : "",
           with_src ? TRAIND_SOURCE_DIR "/data" : "", with_src ? "\n" : "");
  write_file(t.conf, text);
}

// traind with args, its output into out; returns its exit code.
static int traind_run(char *out, size_t n, const char *args) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "%s %s 2>&1", t.bin_traind, args);
  return td_run_out(cmd, out, n);
}

static Traind__V1__JobState state_of(const char *id) {
  Traind__V1__Job *j = td_get(&t, id);
  CHECK(j, "job %s vanished", id);
  Traind__V1__JobState s = j->state;
  protobuf_c_message_free_unpacked(&j->base, NULL);
  return s;
}

// SIGHUP that the daemon must refuse, saying why.
static void reload_refused(const char *why) {
  int seen = td_log_count(&t, why);
  kill(t.pid, SIGHUP);
  td_wait_log(&t, why, seen, 60);
}

int main(void) {
  td_init(&t);
  t.roots_in_conf = 1;
  write_roots(1);
  td_start(&t);

  // A directory as the config file: refused at start and by --check-config.
  const char *dir = tmp_path("confdir");
  CHECK(mkdir(dir, 0755) == 0, "mkdir %s", dir);
  char out[8192], args[2048], want[1024];
  snprintf(want, sizeof want, "%s: not a regular file (a directory)", dir);
  snprintf(args, sizeof args, "--config %s --check-config", dir);
  int rc = traind_run(out, sizeof out, args);
  CHECK(rc == 1 && strstr(out, want), "--check-config with a directory: exit %d, said: %s", rc, out);
  snprintf(args, sizeof args, "--config %s --state-dir %s --socket %s", dir, tmp_path("other-state"),
           tmp_path("other.sock"));
  rc = traind_run(out, sizeof out, args);
  CHECK(rc == 1 && strstr(out, want), "start with a directory as the config: exit %d, said: %s", rc, out);

  // Swapped for a directory before SIGHUP: the old config stays.
  char saved[700];
  snprintf(saved, sizeof saved, "%s.saved", t.conf);
  CHECK(rename(t.conf, saved) == 0 && mkdir(t.conf, 0755) == 0, "swapping %s for a directory", t.conf);
  snprintf(want, sizeof want, "SIGHUP: keeping the current config: %s: not a regular file (a directory)", t.conf);
  reload_refused(want);
  CHECK(rmdir(t.conf) == 0 && rename(saved, t.conf) == 0, "restoring %s", t.conf);

  // A long job on the runner and two queued behind it: b on the source
  // tree's demo text, c on its own copy under <tmp>/data.
  char a[80], b[80], c[80];
  snprintf(a, sizeof a, "%s", td_submit(&t, td_jobfile("long.yaml", 1000000, 1000, NULL), NULL));
  snprintf(b, sizeof b, "%s", td_submit(&t, td_jobfile("b.yaml", 10, 5, NULL), NULL));
  char own[600], text[1 << 16];
  snprintf(own, sizeof own, "%s/data/own.txt", tmp_root);
  FILE *src = fopen(TRAIND_SOURCE_DIR "/data/demo/licenses.txt", "r");
  CHECK(src, "cannot read the demo text");
  text[fread(text, 1, sizeof text - 1, src)] = 0;
  fclose(src);
  write_file(own, text);
  char extra[700];
  snprintf(extra, sizeof extra, "data:\n  train_path: %s\n", own); // the later key wins
  snprintf(c, sizeof c, "%s", td_submit(&t, td_jobfile("c.yaml", 10, 5, extra), NULL));
  td_wait_step(&t, a, 1, 120);

  // Caught empty at SIGHUP: no data root would refuse every job.
  write_file(t.conf, "");
  reload_refused("names no data_root, which would refuse every job (the current config has 2)");
  CHECK(state_of(b) == K(JOB_STATE__JOB_STATE_QUEUED), "job %s is no longer queued", b);

  // The source tree's root taken away: b is held, c fails on its own file.
  write_roots(0);
  td_reload(&t);
  CHECK(unlink(own) == 0, "rm %s", own);
  CHECK(td_ctl(&t, NULL, 0, "cancel %s", a) == 0, "cancel %s", a);
  Traind__V1__Job *jc = td_wait_done(&t, c, 120);
  CHECK(jc->state == K(JOB_STATE__JOB_STATE_FAILED) && strstr(jc->error, "spec.data.train_path") &&
            strstr(jc->error, "not found under the data roots or not readable"),
        "job %s ended %d: %s", c, jc->state, jc->error);
  snprintf(want, sizeof want, "job %s: held in the queue under this config: spec.data.train_path: ", b);
  td_wait_log(&t, want, 0, 60);
  CHECK(state_of(b) == K(JOB_STATE__JOB_STATE_QUEUED), "job %s is not queued", b);
  td_logs(&t, b, text, sizeof text);
  CHECK(strstr(text, "held in the queue: spec.data.train_path: ") && strstr(text, "not found under the data roots or not readable"),
        "job %s's events do not say why it is held:\n%s", b, text);

  // The root back: b runs.
  write_roots(1);
  td_reload(&t);
  td_wait_success(&t, b, 300);
  printf("config: directory refused at start, --check-config and SIGHUP; empty file kept the old config; job %s held "
         "while its root was away, then SUCCEEDED; job %s FAILED on its own file: %s\n",
         b, c, jc->error);
  protobuf_c_message_free_unpacked(&jc->base, NULL);
  td_finish(&t);
  return 0;
}
