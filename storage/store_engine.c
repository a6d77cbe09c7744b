// The engine's eng_store interface (engine/store.h) for one job, on the
// store: eng_save / eng_load stream checkpoints shard by shard through
// store_ckpt_*, the executor's spill tier goes through store_act_*.
#include <stdio.h>
#include <stdlib.h>

#include "store_impl.h"

typedef struct adapter {
  store *s;
  char job[STORE_JOB_MAX + 1];
  int keep;         // checkpoints kept after each commit, 0 = all
  store_ckpt *open; // the checkpoint being written, NULL when none
} adapter;

static int a_begin(void *ctx, int64_t step, eng_err *e) {
  adapter *a = ctx;
  store_ckpt_abort(a->open); // an earlier save that failed before its commit
  a->open = NULL;
  return store_ckpt_begin(a->s, a->job, step, &a->open, e);
}

static int a_put(void *ctx, const char *name, const void *data, size_t n, eng_err *e) {
  adapter *a = ctx;
  if (!a->open) return eng_err_set(e, ENG_ESTATE, "job \"%s\": checkpoint shard put before begin", a->job);
  return store_ckpt_put(a->open, name, data, n, e);
}

static int a_commit(void *ctx, eng_err *e) {
  adapter *a = ctx;
  if (!a->open) return eng_err_set(e, ENG_ESTATE, "job \"%s\": checkpoint commit before begin", a->job);
  int rc = store_ckpt_commit(a->open, e);
  a->open = NULL;
  if (!rc && a->keep > 0) rc = store_ckpt_keep(a->s, a->job, a->keep, e);
  return rc;
}

static int a_latest(void *ctx, int64_t *step, eng_err *e) {
  adapter *a = ctx;
  return store_ckpt_latest(a->s, a->job, step, e);
}

static int a_size(void *ctx, int64_t step, const char *name, size_t *n, eng_err *e) {
  adapter *a = ctx;
  return store_ckpt_size(a->s, a->job, step, name, n, e);
}

static int a_get(void *ctx, int64_t step, const char *name, void *data, size_t n, eng_err *e) {
  adapter *a = ctx;
  return store_ckpt_load(a->s, a->job, step, name, data, n, e);
}

static int a_act_put(void *ctx, int64_t step, int boundary, int micro, const void *data, size_t n, eng_err *e) {
  adapter *a = ctx;
  return store_act_put(a->s, a->job, step, boundary, micro, data, n, e);
}

static int a_act_get(void *ctx, int64_t step, int boundary, int micro, void *data, size_t n, eng_err *e) {
  adapter *a = ctx;
  return store_act_get(a->s, a->job, step, boundary, micro, data, n, e);
}

static int a_act_drop(void *ctx, int64_t step, eng_err *e) {
  adapter *a = ctx;
  return store_act_drop(a->s, a->job, step, e);
}

static void a_close(void *ctx) {
  adapter *a = ctx;
  store_ckpt_abort(a->open);
  free(a);
}

int store_engine_open(eng_store *st, store *s, const char *job, int keep, eng_err *e) {
  int rc = store_job_check(job, e);
  if (rc) return rc;
  if (keep < 0) return eng_err_set(e, ENG_EINVAL, "job \"%s\": keep must be non-negative (got %d)", job, keep);
  adapter *a = calloc(1, sizeof *a);
  if (!a) return eng_err_set(e, ENG_ENOMEM, "job \"%s\": cannot allocate a store adapter", job);
  a->s = s;
  snprintf(a->job, sizeof a->job, "%s", job);
  a->keep = keep;
  // A run killed between a commit and its keep left one checkpoint too many;
  // prune before this run adds any, so deaths in a row cannot pile them up.
  if (keep > 0 && (rc = store_ckpt_keep(s, job, keep, e))) {
    free(a);
    return rc;
  }
  *st = (eng_store){a, a_begin, a_put, a_commit, a_latest, a_size, a_get, a_act_put, a_act_get, a_act_drop,
                    a_close};
  return 0;
}
