#define _GNU_SOURCE // pthread_setname_np
#include "commit.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "mbox.h"


typedef struct op {
  struct op *next;
  store_op_kind kind;
  char job[STORE_JOB_MAX + 1];
  void *bytes; // the record or the event (malloc'd)
  size_t n;
  uint32_t state;
  int64_t order;
  int fresh;
  uint64_t seq;
} op;

typedef struct waiter {
  struct waiter *next;
  uint64_t gen;  // durable once synced reaches it
  commit_fn fn;
  void *arg;
} waiter;

// Every write queued up to gen is durable: to the loop.
typedef struct synced_item {
  mbox_item item;
  uint64_t gen;
} synced_item;

struct commit {
  store *st;
  mbox mb;
  uv_thread_t thread;
  uv_mutex_t mu;
  uv_cond_t cond;
  op *q_head, *q_tail;   // (mu) writes queued, oldest first
  uint64_t queued;       // (mu) writes queued so far
  uint64_t durable;      // (mu) writes the thread has synced
  waiter *t_head, *t_tail; // (mu) waiters that run on the thread
  int stop;              // (mu)
  int running;           // loop: the thread exists
  uv_check_t kick_after;    // loop: wake the thread after the loop's I/O callbacks
  uv_prepare_t kick_before; // and before it blocks
  int unkicked;             // loop: writes queued since the thread was woken
  uint64_t synced;       // loop: writes known durable
  waiter *head, *tail;   // loop
};

static void op_free(op *o) {
  free(o->bytes);
  free(o);
}

// Runs and frees the waiters of the list at *head up to gen upto.
static void run_waiters(waiter **head, waiter **tail, uint64_t upto) {
  while (*head && (*head)->gen <= upto) {
    waiter *w = *head;
    *head = w->next;
    if (!*head) *tail = NULL;
    w->fn(w->arg);
    free(w);
  }
}

// Thread: the thread's waiters up to gen, taken from the list under mu (held
// on entry and exit) and run without it.
static void run_thread_waiters(commit *c, uint64_t gen) {
  waiter *h = c->t_head, *last = NULL;
  while (h && h->gen <= gen) last = h, h = h->next;
  if (!last) return;
  waiter *run = c->t_head, *run_tail = last;
  c->t_head = h;
  if (!h) c->t_tail = NULL;
  last->next = NULL;
  uv_mutex_unlock(&c->mu);
  run_waiters(&run, &run_tail, UINT64_MAX);
  uv_mutex_lock(&c->mu);
}

static void on_synced(mbox *b, mbox_item *it) {
  commit *c = b->data;
  synced_item *s = (synced_item *)it;
  if (s->gen > c->synced) c->synced = s->gen;
  run_waiters(&c->head, &c->tail, s->gen);
  free(s);
}

// One round: every queued write in one atomic batch, then one sync. On
// failure nothing of it was applied and *ops is left as it was.
static int round_write(store *st, op **ops, eng_err *e) {
  size_t n = 0;
  for (op *o = *ops; o; o = o->next) n++;
  store_op *v = malloc((n ? n : 1) * sizeof *v);
  if (!v) return eng_err_set(e, ENG_ENOMEM, "cannot allocate a round of %zu writes", n);
  size_t i = 0;
  for (op *o = *ops; o; o = o->next)
    v[i++] = (store_op){o->kind, o->job, o->bytes, o->n, o->state, o->order, o->fresh, o->seq};
  int rc = store_ops_write(st, v, n, e);
  free(v);
  if (rc) return rc;
  for (op *next; *ops; *ops = next) {
    next = (*ops)->next;
    op_free(*ops);
  }
  return store_sync(st, e);
}

// A round that failed (a full disk, a database being reopened) is tried
// again, its writes ahead of those queued since, 10 ms .. 1 s apart: nothing
// queued is dropped and nothing waiting for it runs before it is durable.
static void sync_thread(void *arg) {
  commit *c = arg;
  pthread_setname_np(pthread_self(), "traind-commit");
  uint64_t backoff_ms = 0;
  uv_mutex_lock(&c->mu);
  for (;;) {
    while (!c->stop && !c->q_head && !backoff_ms) uv_cond_wait(&c->cond, &c->mu);
    if (!c->q_head && !backoff_ms) break; // stopping, nothing queued
    op *ops = c->q_head;
    uint64_t gen = c->queued;
    c->q_head = c->q_tail = NULL;
    uv_mutex_unlock(&c->mu);
    eng_err e = {0};
    int rc = round_write(c->st, &ops, &e);
    uv_mutex_lock(&c->mu);
    if (rc && c->stop) { // the process is ending: say what is lost
      int lost = 0;
      for (op *next; ops; ops = next, lost++) {
        next = ops->next;
        op_free(ops);
      }
      for (op *next, *o = c->q_head; o; o = next, lost++) {
        next = o->next;
        op_free(o);
      }
      c->q_head = c->q_tail = NULL;
      log_err("storage: %s; stopping with %d writes of the job table not made", e.msg, lost);
      break;
    }
    if (rc) {
      if (!backoff_ms) log_err("storage: %s; retrying the job table's writes until it works", e.msg);
      if (ops) { // back at the head, before what came meanwhile
        op *last = ops;
        while (last->next) last = last->next;
        last->next = c->q_head;
        if (!c->q_head) c->q_tail = last;
        c->q_head = ops;
      }
      backoff_ms = backoff_ms ? (backoff_ms * 2 > 1000 ? 1000 : backoff_ms * 2) : 10;
      uv_mutex_unlock(&c->mu);
      uv_sleep((unsigned)backoff_ms);
      uv_mutex_lock(&c->mu);
      continue;
    }
    if (backoff_ms) log_info("storage: the job table's writes go through again");
    backoff_ms = 0;
    c->durable = gen;
    run_thread_waiters(c, gen);
    synced_item *s = calloc(1, sizeof *s);
    if (s) {
      s->gen = gen;
      mbox_post(&c->mb, &s->item);
    } // else the next round's report covers these waiters too
  }
  run_thread_waiters(c, UINT64_MAX); // what a failed last round leaves, as commit_stop does
  uv_mutex_unlock(&c->mu);
}

static void on_closed_free(uv_handle_t *h) {
  mbox *b = h->data;
  commit_free(b->data);
}

static void kick(commit *c);
static void kick_after(uv_check_t *h) { kick(h->data); }
static void kick_before(uv_prepare_t *h) { kick(h->data); }

int commit_start(commit **out, uv_loop_t *loop, store *st) {
  commit *c = calloc(1, sizeof *c);
  if (!c) return -1;
  c->st = st;
  uv_mutex_init(&c->mu);
  uv_cond_init(&c->cond);
  if (mbox_init(&c->mb, loop, on_synced, c)) {
    commit_free(c);
    return -1;
  }
  if (uv_thread_create(&c->thread, sync_thread, c)) {
    mbox_close(&c->mb, on_closed_free);
    return -1;
  }
  uv_check_init(loop, &c->kick_after);
  uv_prepare_init(loop, &c->kick_before);
  c->kick_after.data = c->kick_before.data = c;
  uv_check_start(&c->kick_after, kick_after);
  uv_prepare_start(&c->kick_before, kick_before);
  uv_unref((uv_handle_t *)&c->kick_after); // they keep no loop alive
  uv_unref((uv_handle_t *)&c->kick_before);
  c->running = 1;
  *out = c;
  return 0;
}

static void enqueue(commit *c, op *o) {
  if (!c->running) { // stopped: made here, synced
    eng_err e = {0};
    if (round_write(c->st, &o, &e)) log_err("storage: %s; a write of job %s is lost", e.msg, o->job);
    for (op *next; o; o = next) {
      next = o->next;
      op_free(o);
    }
    return;
  }
  uv_mutex_lock(&c->mu);
  if (c->q_tail) c->q_tail->next = o;
  else c->q_head = o;
  c->q_tail = o;
  c->queued++;
  uv_mutex_unlock(&c->mu);
  c->unkicked = 1;
}

// After each loop iteration's I/O callbacks (the calls that arrived), and
// before the loop blocks (what timers and the rest queued): one round for
// everything they queued, not a round (and a sync) for each.
static void kick(commit *c) {
  if (!c->unkicked) return;
  c->unkicked = 0;
  uv_mutex_lock(&c->mu);
  uv_cond_signal(&c->cond);
  uv_mutex_unlock(&c->mu);
}

static op *op_new(store_op_kind kind, const char *job, void *bytes, size_t n) {
  op *o = calloc(1, sizeof *o);
  if (!o) {
    free(bytes);
    log_err("job %s: out of memory queueing a write; it is lost", job);
    return NULL;
  }
  o->kind = kind;
  snprintf(o->job, sizeof o->job, "%s", job);
  o->bytes = bytes;
  o->n = n;
  return o;
}

void commit_job_put(commit *c, const char *job, void *rec, size_t n, uint32_t state, int64_t order, int fresh) {
  op *o = op_new(STORE_OP_JOB_PUT, job, rec, n);
  if (!o) return;
  o->state = state;
  o->order = order;
  o->fresh = fresh;
  enqueue(c, o);
}

void commit_job_delete(commit *c, const char *job) {
  op *o = op_new(STORE_OP_JOB_DELETE, job, NULL, 0);
  if (o) enqueue(c, o);
}

void commit_event_put(commit *c, const char *job, uint64_t seq, void *ev, size_t n) {
  op *o = op_new(STORE_OP_EVENT_PUT, job, ev, n);
  if (!o) return;
  o->seq = seq;
  enqueue(c, o);
}

int commit_when_durable(commit *c, commit_fn fn, void *arg) {
  uv_mutex_lock(&c->mu);
  uint64_t gen = c->queued;
  uv_mutex_unlock(&c->mu);
  if (c->synced >= gen) {
    fn(arg);
    return 0;
  }
  waiter *w = calloc(1, sizeof *w);
  if (!w) return -1;
  *w = (waiter){NULL, gen, fn, arg};
  if (c->tail) c->tail->next = w;
  else c->head = w;
  c->tail = w;
  return 0;
}

int commit_when_durable_any(commit *c, commit_fn fn, void *arg) {
  waiter *w = calloc(1, sizeof *w);
  if (!w) return -1;
  uv_mutex_lock(&c->mu);
  int now = !c->running || c->durable >= c->queued;
  if (!now) {
    *w = (waiter){NULL, c->queued, fn, arg};
    if (c->t_tail) c->t_tail->next = w;
    else c->t_head = w;
    c->t_tail = w;
  }
  uv_mutex_unlock(&c->mu);
  if (now) {
    free(w);
    fn(arg);
  }
  return 0;
}

void commit_stop(commit *c) {
  if (!c || !c->running) return;
  uv_mutex_lock(&c->mu);
  c->stop = 1;
  uv_cond_signal(&c->cond);
  uv_close((uv_handle_t *)&c->kick_after, NULL);
  uv_close((uv_handle_t *)&c->kick_before, NULL);
  uv_mutex_unlock(&c->mu);
  uv_thread_join(&c->thread); // it writes and syncs what is queued first
  c->running = 0;
  mbox_close(&c->mb, NULL);
  // The rounds not yet reported are dropped with the mbox: the thread ended
  // after the last of them, so every write queued is applied and synced.
  for (mbox_item *it = c->mb.head; it;) {
    mbox_item *next = it->next;
    free(it);
    it = next;
  }
  c->mb.head = c->mb.tail = NULL;
  c->synced = c->queued;
  run_waiters(&c->head, &c->tail, UINT64_MAX);
}

void commit_free(commit *c) {
  if (!c) return;
  uv_mutex_destroy(&c->mu);
  uv_cond_destroy(&c->cond);
  free(c);
}
