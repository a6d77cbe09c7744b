#include "commit.h"

#include <stdint.h>
#include <stdlib.h>

#include "log.h"
#include "mbox.h"

typedef struct waiter {
  struct waiter *next;
  uint64_t gen;  // durable once synced reaches it
  commit_fn fn;
  void *arg;
} waiter;

// One sync's outcome, posted to the loop.
typedef struct synced_item {
  mbox_item item;
  uint64_t gen;
  int rc;
  char err[sizeof(((eng_err *)0)->msg)];
} synced_item;

struct commit {
  store *st;
  mbox mb;
  uv_thread_t thread;
  uv_mutex_t mu;
  uv_cond_t cond;
  uint64_t want;     // (mu) writes made so far; the thread syncs up to it
  int stop;          // (mu)
  int running;       // loop: the thread exists
  uint64_t written;  // loop: writes made so far
  uint64_t synced;   // loop: writes known durable
  waiter *head, *tail;
};

static void run_waiters(commit *c, uint64_t upto, int rc, const char *err) {
  while (c->head && c->head->gen <= upto) {
    waiter *w = c->head;
    c->head = w->next;
    if (!c->head) c->tail = NULL;
    w->fn(w->arg, rc, err);
    free(w);
  }
}

static void on_synced(mbox *b, mbox_item *it) {
  commit *c = b->data;
  synced_item *s = (synced_item *)it;
  if (s->rc) log_err("storage: %s", s->err);
  if (s->gen > c->synced) c->synced = s->gen;
  run_waiters(c, s->gen, s->rc, s->err);
  free(s);
}

static void sync_thread(void *arg) {
  commit *c = arg;
  uint64_t done = 0;
  uv_mutex_lock(&c->mu);
  for (;;) {
    while (!c->stop && c->want == done) uv_cond_wait(&c->cond, &c->mu);
    if (c->want == done) break; // stopping, nothing outstanding
    uint64_t gen = c->want;
    uv_mutex_unlock(&c->mu);
    synced_item *s = calloc(1, sizeof *s);
    eng_err e = {0};
    int rc = store_sync(c->st, &e);
    if (s) {
      s->gen = gen;
      s->rc = rc;
      snprintf(s->err, sizeof s->err, "%s", rc ? e.msg : "");
      mbox_post(&c->mb, &s->item);
    }
    done = gen;
    uv_mutex_lock(&c->mu);
  }
  uv_mutex_unlock(&c->mu);
}

static void on_closed_free(uv_handle_t *h) {
  mbox *b = h->data;
  commit_free(b->data);
}

int commit_start(commit **out, uv_loop_t *loop, store *st) {
  commit *c = calloc(1, sizeof *c);
  if (!c) return -1;
  c->st = st;
  uv_mutex_init(&c->mu);
  uv_cond_init(&c->cond);
  if (mbox_init(&c->mb, loop, on_synced, c)) {
    free(c);
    return -1;
  }
  if (uv_thread_create(&c->thread, sync_thread, c)) {
    mbox_close(&c->mb, on_closed_free);
    return -1;
  }
  c->running = 1;
  *out = c;
  return 0;
}

void commit_wrote(commit *c) {
  c->written++;
  if (!c->running) { // stopped: each write is synced where it is made
    eng_err e = {0};
    if (store_sync(c->st, &e)) log_err("storage: %s", e.msg);
    c->synced = c->written;
    return;
  }
  uv_mutex_lock(&c->mu);
  c->want = c->written;
  uv_cond_signal(&c->cond);
  uv_mutex_unlock(&c->mu);
}

int commit_when_durable(commit *c, commit_fn fn, void *arg) {
  if (c->synced >= c->written) {
    fn(arg, 0, "");
    return 0;
  }
  waiter *w = calloc(1, sizeof *w);
  if (!w) return -1;
  *w = (waiter){NULL, c->written, fn, arg};
  if (c->tail) c->tail->next = w;
  else c->head = w;
  c->tail = w;
  return 0;
}

void commit_stop(commit *c) {
  if (!c || !c->running) return;
  uv_mutex_lock(&c->mu);
  c->stop = 1;
  uv_cond_signal(&c->cond);
  uv_mutex_unlock(&c->mu);
  uv_thread_join(&c->thread); // it syncs what is outstanding first
  c->running = 0;
  mbox_close(&c->mb, NULL);
  // The posts not yet handled are dropped with the mbox: their syncs
  // covered everything written, so the waiters are durable.
  for (mbox_item *it = c->mb.head; it;) {
    mbox_item *next = it->next;
    free(it);
    it = next;
  }
  c->mb.head = c->mb.tail = NULL;
  c->synced = c->written;
  run_waiters(c, UINT64_MAX, 0, "");
}

void commit_free(commit *c) {
  if (!c) return;
  uv_mutex_destroy(&c->mu);
  uv_cond_destroy(&c->cond);
  free(c);
}
