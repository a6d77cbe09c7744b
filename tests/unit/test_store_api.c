// The store's API on real RocksDB files: job records and both indexes,
// events from a sequence number, checkpoints (commit, list, load, re-save,
// delete, keep-last-K, abort), everything surviving a reopen, and a
// checkpoint whose writer died after its shards reached disk but before its
// manifest (a child process killed at the store's fault point) collected at
// the next open, blob files and all.
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <inttypes.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "storage/store.h"
#include "unit/tmpdir.h"

static eng_err e;

typedef struct seen {
  char jobs[8][STORE_JOB_MAX + 1];
  uint32_t states[8];
  int64_t orders[8];
  int n;
} seen;

static int collect_job(void *ctx, const char *job, uint32_t state, int64_t order) {
  seen *s = ctx;
  snprintf(s->jobs[s->n], sizeof s->jobs[0], "%s", job);
  s->states[s->n] = state;
  s->orders[s->n++] = order;
  return 0;
}

static seen by_state(store *st, uint32_t state) {
  seen s = {.n = 0};
  CHECK_OK(store_job_scan_state(st, state, collect_job, &s, &e), &e);
  return s;
}

static seen by_queue(store *st) {
  seen s = {.n = 0};
  CHECK_OK(store_job_scan_queue(st, collect_job, &s, &e), &e);
  return s;
}

static void check_jobs(store *st) {
  void *rec;
  size_t n;
  uint32_t state;
  int64_t order;
  CHECK_OK(store_job_get(st, "j1", &rec, &n, &state, &order, &e), &e);
  CHECK(n == 6 && !memcmp(rec, "first!", 6) && state == 1 && order == 5, "j1 record, state or order wrong");
  free(rec);
  CHECK(store_job_get(st, "nope", &rec, &n, NULL, NULL, &e) == 1, "a missing job must give 1");
  seen s1 = by_state(st, 1), s2 = by_state(st, 2), q = by_queue(st);
  CHECK(s1.n == 1 && !strcmp(s1.jobs[0], "j1") && s1.orders[0] == 5, "state 1 holds j1 only (got %d)", s1.n);
  CHECK(s2.n == 2 && !strcmp(s2.jobs[0], "j2") && !strcmp(s2.jobs[1], "j3"), "state 2 holds j2, j3");
  CHECK(q.n == 2 && !strcmp(q.jobs[0], "j3") && q.orders[0] == 2 && !strcmp(q.jobs[1], "j1") &&
        q.states[1] == 1, "queue order j3 (2), j1 (5)");
}

static void jobs(store *st) {
  CHECK_OK(store_job_put(st, "j1", "first!", 6, 1, 5, &e), &e);
  CHECK_OK(store_job_put(st, "j2", "second", 6, 1, 3, &e), &e);
  CHECK_OK(store_job_put(st, "j3", "", 0, 2, -1, &e), &e);
  seen q = by_queue(st);
  CHECK(q.n == 2 && !strcmp(q.jobs[0], "j2") && !strcmp(q.jobs[1], "j1"), "queue order j2 (3), j1 (5)");
  // j2 leaves the queue and changes state; j3 joins it: old index entries go.
  CHECK_OK(store_job_put(st, "j2", "second, run", 11, 2, -1, &e), &e);
  CHECK_OK(store_job_put(st, "j3", "third", 5, 2, 2, &e), &e);
  check_jobs(st);
  CHECK(store_job_put(st, "bad/id", "", 0, 0, 0, &e) == ENG_EINVAL && strstr(e.msg, "bad/id"),
        "an invalid job id is refused by name: %s", e.msg);
  CHECK_OK(store_job_put(st, "gone", "x", 1, 1, 1, &e), &e);
  CHECK_OK(store_job_delete(st, "gone", &e), &e);
  check_jobs(st);
  printf("jobs: records, state index and queue order kept in step over updates and a delete\n");
}

// One batch that writes the same jobs more than once: each is indexed as its
// last write in the batch says, also after a first put marked fresh (no read
// of a stored record), and a failed id leaves nothing written.
static void batch(store *st) {
  store_op ops[] = {
      {.kind = STORE_OP_JOB_PUT, .job = "b1", .bytes = "q", .n = 1, .state = 7, .order = 40, .fresh = 1},
      {.kind = STORE_OP_EVENT_PUT, .job = "b1", .bytes = "e1", .n = 2, .seq = 1},
      {.kind = STORE_OP_JOB_PUT, .job = "b2", .bytes = "q", .n = 1, .state = 7, .order = 41, .fresh = 1},
      {.kind = STORE_OP_JOB_PUT, .job = "b1", .bytes = "run", .n = 3, .state = 8, .order = -1},
      {.kind = STORE_OP_JOB_DELETE, .job = "b2"},
      {.kind = STORE_OP_JOB_PUT, .job = "b3", .bytes = "x", .n = 1, .state = 7, .order = 42},
      {.kind = STORE_OP_JOB_DELETE, .job = "b3"},
      {.kind = STORE_OP_JOB_PUT, .job = "b3", .bytes = "again", .n = 5, .state = 7, .order = 43},
  };
  CHECK_OK(store_ops_write(st, ops, sizeof ops / sizeof ops[0], &e), &e);
  seen s7 = by_state(st, 7), s8 = by_state(st, 8), q = by_queue(st);
  CHECK(s7.n == 1 && !strcmp(s7.jobs[0], "b3") && s7.orders[0] == 43, "state 7 holds b3 only (got %d)", s7.n);
  CHECK(s8.n == 1 && !strcmp(s8.jobs[0], "b1") && s8.orders[0] == -1, "state 8 holds b1 only (got %d)", s8.n);
  int in_queue = 0;
  for (int i = 0; i < q.n; i++) in_queue += !strncmp(q.jobs[i], "b", 1);
  CHECK(in_queue == 1, "only b3 of the batch is queued (got %d)", in_queue);
  void *rec;
  size_t n;
  CHECK(store_job_get(st, "b2", &rec, &n, NULL, NULL, &e) == 1, "b2, deleted in the batch, must be gone");
  CHECK_OK(store_job_get(st, "b3", &rec, &n, NULL, NULL, &e), &e);
  CHECK(n == 5 && !memcmp(rec, "again", 5), "b3 is its last write");
  free(rec);
  // A later batch finds b1's entries from its stored record.
  store_op back = {.kind = STORE_OP_JOB_PUT, .job = "b1", .bytes = "q", .n = 1, .state = 7, .order = 50};
  CHECK_OK(store_ops_write(st, &back, 1, &e), &e);
  s7 = by_state(st, 7), s8 = by_state(st, 8);
  CHECK(s7.n == 2 && s8.n == 0, "b1 moved from state 8 to 7 (got %d and %d)", s7.n, s8.n);
  store_op bad[] = {{.kind = STORE_OP_JOB_PUT, .job = "b4", .bytes = "x", .n = 1, .state = 7, .order = 44},
                    {.kind = STORE_OP_JOB_PUT, .job = "bad/id", .bytes = "x", .n = 1, .state = 7, .order = 45}};
  CHECK(store_ops_write(st, bad, 2, &e) == ENG_EINVAL && strstr(e.msg, "bad/id"), "a bad id refuses the batch");
  CHECK(store_job_get(st, "b4", &rec, &n, NULL, NULL, &e) == 1, "a refused batch writes nothing");
  for (const char *j = "b1"; j; j = !strcmp(j, "b1") ? "b3" : NULL) CHECK_OK(store_job_delete(st, j, &e), &e);
  printf("batch: a job written twice in one batch is indexed by its last write; a bad id writes nothing\n");
}

typedef struct evs {
  uint64_t seq[16];
  char text[16][16];
  int n, stop_at;
} evs;

static int collect_event(void *ctx, uint64_t seq, const void *ev, size_t n) {
  evs *v = ctx;
  v->seq[v->n] = seq;
  snprintf(v->text[v->n++], sizeof v->text[0], "%.*s", (int)n, (const char *)ev);
  return v->n == v->stop_at ? 7 : 0;
}

static void check_events(store *st) {
  evs v = {.n = 0};
  CHECK_OK(store_event_scan(st, "j1", 3, collect_event, &v, &e), &e);
  CHECK(v.n == 3 && v.seq[0] == 3 && !strcmp(v.text[0], "ev3") && v.seq[2] == 5 && !strcmp(v.text[2], "ev5"),
        "events of j1 from 3: got %d", v.n);
  evs w = {.n = 0};
  CHECK_OK(store_event_scan(st, "j2", 0, collect_event, &w, &e), &e);
  CHECK(w.n == 2 && w.seq[0] == 1 && !strcmp(w.text[1], "other2"), "events of j2: got %d", w.n);
  evs x = {.n = 0, .stop_at = 2};
  CHECK(store_event_scan(st, "j1", 1, collect_event, &x, &e) == 7 && x.n == 2, "a scan stops on request");
}

static void events(store *st) {
  for (int i = 1; i <= 5; i++) {
    char ev[16];
    snprintf(ev, sizeof ev, "ev%d", i);
    CHECK_OK(store_event_put(st, "j1", (uint64_t)i, ev, strlen(ev), &e), &e);
    uint64_t last;
    CHECK_OK(store_event_last(st, "j1", &last, &e), &e);
    CHECK(last == (uint64_t)i, "after event %d the last is %" PRIu64, i, last);
    if (i <= 2) {
      snprintf(ev, sizeof ev, "other%d", i);
      CHECK_OK(store_event_put(st, "j2", (uint64_t)i, ev, strlen(ev), &e), &e);
    }
  }
  check_events(st);
  printf("events: sequences 1.. per job, scans from any sequence\n");
}

enum { BIG = 300000 };

static void fill(uint8_t *p, size_t n, int seed) {
  for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(i * 131 + (size_t)seed * 7 + (i >> 11));
}

static void save(store *st, const char *job, int64_t step, int seed) {
  static uint8_t big[BIG];
  fill(big, BIG, seed);
  store_ckpt *c;
  CHECK_OK(store_ckpt_begin(st, job, step, &c, &e), &e);
  CHECK_OK(store_ckpt_put(c, "big", big, BIG, &e), &e);
  CHECK_OK(store_ckpt_put(c, "meta", &seed, sizeof seed, &e), &e);
  CHECK_OK(store_ckpt_commit(c, &e), &e);
}

static void check_ckpt(store *st, const char *job, int64_t step, int seed) {
  static uint8_t want[BIG], got[BIG];
  fill(want, BIG, seed);
  size_t n;
  CHECK_OK(store_ckpt_size(st, job, step, "big", &n, &e), &e);
  CHECK(n == BIG, "size of big: %zu", n);
  CHECK_OK(store_ckpt_load(st, job, step, "big", got, BIG, &e), &e);
  CHECK(!memcmp(got, want, BIG), "step %" PRId64 ": shard big differs", step);
  int m;
  CHECK_OK(store_ckpt_load(st, job, step, "meta", &m, sizeof m, &e), &e);
  CHECK(m == seed, "step %" PRId64 ": meta %d, expected %d", step, m, seed);
  int shards;
  CHECK_OK(store_ckpt_verify(st, job, step, &shards, &e), &e);
  CHECK(shards == 2, "two shards, got %d", shards);
}

static void check_list(store *st, const char *job, int n_want, const int64_t *want) {
  int64_t steps[16];
  int n;
  CHECK_OK(store_ckpt_list(st, job, steps, 16, &n, &e), &e);
  CHECK(n == n_want, "job %s: %d checkpoints, expected %d", job, n, n_want);
  for (int i = 0; i < n; i++) CHECK(steps[i] == want[i], "checkpoint %d: step %" PRId64, i, steps[i]);
}

static void checkpoints(store *st) {
  int64_t latest;
  CHECK(store_ckpt_latest(st, "j1", &latest, &e) == 1, "no checkpoint yet");
  save(st, "j1", 10, 1);
  save(st, "j1", 20, 2);
  save(st, "j1", 30, 3);
  save(st, "j2", 5, 9);
  CHECK_OK(store_ckpt_latest(st, "j1", &latest, &e), &e);
  CHECK(latest == 30, "latest %" PRId64, latest);
  check_list(st, "j1", 3, (int64_t[]){10, 20, 30});
  check_ckpt(st, "j1", 10, 1);
  uint8_t small[4];
  CHECK(store_ckpt_load(st, "j1", 10, "big", small, 4, &e) == ENG_EINVAL && strstr(e.msg, "big"),
        "a size mismatch is refused: %s", e.msg);
  CHECK(store_ckpt_load(st, "j1", 10, "none", small, 4, &e) == ENG_EINVAL && strstr(e.msg, "\"none\""),
        "a missing shard is named: %s", e.msg);
  CHECK(store_ckpt_load(st, "j1", 11, "big", small, 4, &e) == ENG_EINVAL && strstr(e.msg, "step 11"),
        "a missing step is named: %s", e.msg);

  // An aborted checkpoint and an uncommitted one never show.
  store_ckpt *c;
  CHECK_OK(store_ckpt_begin(st, "j1", 40, &c, &e), &e);
  CHECK_OK(store_ckpt_put(c, "big", small, 4, &e), &e);
  CHECK(store_ckpt_put(c, "big", small, 4, &e) == ENG_EINVAL, "a shard put twice is refused");
  store_ckpt_abort(c);
  check_list(st, "j1", 3, (int64_t[]){10, 20, 30});

  // Re-saving a step replaces it; keep-last-2; deleting the latest moves it back.
  save(st, "j1", 20, 22);
  check_ckpt(st, "j1", 20, 22);
  CHECK_OK(store_ckpt_latest(st, "j1", &latest, &e), &e);
  CHECK(latest == 20, "the re-saved step is the last committed (%" PRId64 ")", latest);
  save(st, "j1", 30, 3);
  CHECK_OK(store_ckpt_keep(st, "j1", 2, &e), &e);
  check_list(st, "j1", 2, (int64_t[]){20, 30});
  CHECK_OK(store_ckpt_delete(st, "j1", 30, &e), &e);
  CHECK_OK(store_ckpt_latest(st, "j1", &latest, &e), &e);
  CHECK(latest == 20, "after deleting 30 the latest is 20 (%" PRId64 ")", latest);
  save(st, "j1", 30, 3);
  check_list(st, "j1", 2, (int64_t[]){20, 30});
  check_list(st, "j2", 1, (int64_t[]){5});
  printf("checkpoints: commit, list, load, re-save, abort, keep-last-2, delete\n");
}

static uint64_t blob_bytes(const char *dir) {
  DIR *d = opendir(dir);
  CHECK(d, "cannot list %s", dir);
  uint64_t total = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    size_t n = strlen(de->d_name);
    if (n < 5 || strcmp(de->d_name + n - 5, ".blob")) continue;
    char p[1024];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
    if (stat(p, &sb) == 0) total += (uint64_t)sb.st_size;
  }
  closedir(d);
  return total;
}

// Child: writes 8 MiB of shards for step 50 and is killed by the store's
// fault point after the flush made them durable, before the manifest.
static int child_pending(const char *dir) {
  store *st;
  CHECK_OK(store_open(&st, dir, NULL, &e), &e);
  static uint8_t big[1 << 20];
  store_ckpt *c;
  CHECK_OK(store_ckpt_begin(st, "j1", 50, &c, &e), &e);
  for (int i = 0; i < 8; i++) {
    char name[16];
    fill(big, sizeof big, 100 + i);
    snprintf(name, sizeof name, "s%d", i);
    CHECK_OK(store_ckpt_put(c, name, big, sizeof big, &e), &e);
  }
  store_ckpt_commit(c, &e);
  fprintf(stderr, "child: the fault point did not fire\n");
  return 1;
}

static void pending_collected(const char *self, const char *dir) {
  uint64_t before = blob_bytes(dir);
  char *args[] = {(char *)self, "--pending", (char *)dir, NULL};
  char *envp[] = {"TRAIND_STORE_FAULT=ckpt_manifest:1", NULL};
  pid_t pid = fork();
  CHECK(pid >= 0, "fork failed");
  if (pid == 0) { // only exec after fork: the parent has RocksDB's threads
    execve(self, args, envp);
    _exit(127);
  }
  int status;
  CHECK(waitpid(pid, &status, 0) == pid, "waitpid failed");
  CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "the child should die of SIGKILL (status %d)", status);
  uint64_t dead = blob_bytes(dir);
  CHECK(dead >= before + (8u << 20), "the dead child's shards should be in blob files (%" PRIu64 " -> %" PRIu64
        " bytes)", before, dead);
  store *st;
  CHECK_OK(store_open(&st, dir, NULL, &e), &e);
  check_list(st, "j1", 2, (int64_t[]){20, 30});
  uint64_t after = blob_bytes(dir); // the open's reclaim returns once the files are deleted
  CHECK(after <= before, "the unfinished checkpoint's blob files should be deleted at open (%" PRIu64 " bytes "
        "before it, %" PRIu64 " after the kill, %" PRIu64 " after open)", before, dead, after);
  store_close(st);
  printf("unfinished checkpoint: %" PRIu64 " blob bytes on disk after the kill, collected at open (%" PRIu64
         " -> %" PRIu64 ")\n", dead - before, dead, after);
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--pending")) return child_pending(argv[2]);
  tmp_make();
  const char *dir = tmp_path("db");
  store *st;
  CHECK_OK(store_open(&st, dir, NULL, &e), &e);
  jobs(st);
  batch(st);
  events(st);
  checkpoints(st);
  store_close(st);

  CHECK_OK(store_open(&st, dir, NULL, &e), &e);
  check_jobs(st);
  check_events(st);
  check_list(st, "j1", 2, (int64_t[]){20, 30});
  check_ckpt(st, "j1", 20, 22);
  check_ckpt(st, "j1", 30, 3);
  check_ckpt(st, "j2", 5, 9);
  uint64_t seq;
  CHECK_OK(store_event_last(st, "j1", &seq, &e), &e);
  CHECK(seq == 5, "the last sequence survives a reopen (%" PRIu64 ")", seq);
  CHECK_OK(store_event_put(st, "j1", seq + 1, "ev6", 3, &e), &e);
  CHECK_OK(store_job_delete(st, "j2", &e), &e);
  check_list(st, "j2", 0, NULL);
  store_close(st);
  printf("reopen: records, indexes, events and checkpoints all there; a deleted job takes its own along\n");

  pending_collected(argv[0], dir);
  tmp_cleanup();
  return 0;
}
