// The group commit (daemon/commit.c) over a real RocksDB store: a waiter
// runs only after the writes queued before it were made (readable here; the
// round syncs them before any waiter runs),
// in the order the waiters came; the loop's waiters on the loop, the
// thread's (commit_when_durable_any, which answers clients) on the commit
// thread the moment the sync returns, and at once when nothing is
// outstanding or the thread has stopped. The thread is woken by the loop's
// iterations (one round for all an iteration queued): the test runs it. The test waits on the waiters
// themselves, never on time.
#define _XOPEN_SOURCE 700
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "check.h"
#include "commit.h"
#include "unit/tmpdir.h"

static store *st;
static pthread_t main_thread;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;

// What one waiter saw when it ran.
typedef struct seen {
  const char *job; // must be stored when the waiter runs
  int ran, order, on_main, stored;
} seen;
static int ran_so_far;

static void note(void *arg) {
  seen *s = arg;
  void *rec = NULL;
  size_t n;
  eng_err e = {0};
  int rc = store_job_get(st, s->job, &rec, &n, NULL, NULL, &e);
  free(rec);
  pthread_mutex_lock(&mu);
  s->stored = rc == 0;
  s->on_main = pthread_equal(pthread_self(), main_thread);
  s->order = ++ran_so_far;
  s->ran = 1;
  pthread_cond_broadcast(&cond);
  pthread_mutex_unlock(&mu);
}

static int ran(seen *s) {
  pthread_mutex_lock(&mu);
  int r = s->ran;
  pthread_mutex_unlock(&mu);
  return r;
}

// The loop runs until s has: the thread is woken by the loop's iterations,
// and each round's report wakes the loop.
static void run_until(uv_loop_t *loop, seen *s) {
  while (!ran(s)) uv_run(loop, UV_RUN_ONCE);
}

static void put(commit *c, const char *job) {
  char *rec = strdup(job);
  CHECK(rec, "out of memory");
  commit_job_put(c, job, rec, strlen(rec), 1, 0, 0);
}

int main(void) {
  tmp_make();
  main_thread = pthread_self();
  store_options so;
  store_options_defaults(&so);
  so.group_commit = 1;
  eng_err e = {0};
  CHECK_OK(store_open(&st, tmp_path("db"), &so, &e), &e);
  uv_loop_t loop;
  CHECK(uv_loop_init(&loop) == 0, "uv_loop_init");
  commit *c;
  CHECK(commit_start(&c, &loop, st) == 0, "commit_start");

  // Thread waiters, each after a write: in order, off the loop, each with
  // its write (and those before it) readable.
  seen a = {.job = "job-a"}, b = {.job = "job-b"};
  put(c, "job-a");
  CHECK(commit_when_durable_any(c, note, &a) == 0, "commit_when_durable_any");
  put(c, "job-b");
  CHECK(commit_when_durable_any(c, note, &b) == 0, "commit_when_durable_any");
  run_until(&loop, &b);
  run_until(&loop, &a);
  CHECK(a.order == 1 && b.order == 2, "thread waiters ran out of order (%d, %d)", a.order, b.order);
  CHECK(a.stored && b.stored, "a thread waiter ran before its write was stored (%d, %d)", a.stored, b.stored);
  CHECK(!a.on_main && !b.on_main, "a thread waiter ran on the loop's thread");

  // Nothing outstanding: at once, here.
  seen now = {.job = "job-b"};
  CHECK(commit_when_durable_any(c, note, &now) == 0, "commit_when_durable_any");
  CHECK(now.ran && now.on_main && now.stored, "with nothing outstanding the waiter did not run at once");

  // A loop waiter and a thread waiter after the same write: the loop's on
  // the loop (uv_run until it has), the thread's on the thread.
  seen l = {.job = "job-c"}, t = {.job = "job-c"};
  put(c, "job-c");
  CHECK(commit_when_durable(c, note, &l) == 0, "commit_when_durable");
  CHECK(commit_when_durable_any(c, note, &t) == 0, "commit_when_durable_any");
  run_until(&loop, &l);
  run_until(&loop, &t);
  CHECK(l.stored && l.on_main, "the loop waiter: stored %d, on the loop %d", l.stored, l.on_main);
  CHECK(t.stored && !t.on_main, "the thread waiter: stored %d, on the loop %d", t.stored, t.on_main);

  // Stopped: writes are made at once and waiters run at once.
  commit_stop(c);
  seen after = {.job = "job-d"};
  put(c, "job-d");
  CHECK(commit_when_durable_any(c, note, &after) == 0, "commit_when_durable_any");
  CHECK(after.ran && after.on_main && after.stored, "after the stop the waiter did not run at once with its write");
  uv_run(&loop, UV_RUN_DEFAULT); // the mbox's close
  CHECK(uv_loop_close(&loop) == 0, "a handle is still open");
  commit_free(c);
  store_close(st);
  tmp_cleanup();
  printf("test_daemon_commit: ok\n");
  return 0;
}
