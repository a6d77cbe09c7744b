// Job records and their two indexes, kept in step in one synced batch:
//   'R' J             -> state u32, order i64, record
//   'S' state J       -> order i64      (by state)
//   'Q' order J       -> state u32      (queue, only when order >= 0)
// so that a scan of either index needs no second read.
#include <inttypes.h>
#include <stdlib.h>

#include "common/hash.h"
#include "store_impl.h"

enum { HEADER = 12 };

static skey key_record(const char *job) {
  skey k = key_tag('R');
  key_job(&k, job);
  return k;
}

static skey key_state(uint32_t state, const char *job) {
  skey k = key_tag('S');
  key_be32(&k, state);
  key_job(&k, job);
  return k;
}

static skey key_queue(int64_t order, const char *job) {
  skey k = key_tag('Q');
  key_be64(&k, (uint64_t)order);
  key_job(&k, job);
  return k;
}

// Reads the record value ('R'): 1 when absent. *v is rocksdb-allocated.
static int read_record(store *s, const char *job, char **v, size_t *n, eng_err *e) {
  skey k = key_record(job);
  char *err = NULL;
  *v = rocksdb_get_cf(s->db, s->rd, s->cf[CF_JOBS], k.b, k.n, n, &err);
  if (err) return store_rocks_err(s, err, 0, e, "reading job \"%s\"", job);
  if (!*v) return 1;
  if (*n < HEADER) {
    rocksdb_free(*v);
    return eng_err_set(e, STORE_ECORRUPT, "job \"%s\": record of %zu bytes is damaged", job, *n);
  }
  return 0;
}

// What a batch being built has done to one job's record: its index entries
// are those, not the stored record's, for any later write in the batch.
typedef struct seen {
  const char *job; // NULL: a free slot
  int present;
  uint32_t state;
  int64_t order;
} seen;

// The slot of job in a table of cap (a power of two) slots.
static seen *seen_slot(seen *t, size_t cap, const char *job) {
  size_t i = (size_t)eng_fnv1a64(ENG_FNV1A64_INIT, job, strlen(job)) & (cap - 1);
  while (t[i].job && strcmp(t[i].job, job)) i = (i + 1) & (cap - 1);
  return &t[i];
}

// Adds the deletion of the job's index entries to b, as the batch so far
// (sn, when it touched the job) or else its stored record names them:
// nothing when the job has no record yet (fresh: known without a read).
// 0 or an error.
static int unindex(store *s, rocksdb_writebatch_t *b, const char *job, const seen *sn, int fresh, eng_err *e) {
  char *v = NULL;
  size_t n;
  uint32_t state;
  int64_t order;
  if (sn->job) {
    if (!sn->present) return 0;
    state = sn->state, order = sn->order;
  } else if (fresh) {
    return 0;
  } else {
    int rc = read_record(s, job, &v, &n, e);
    if (rc) return rc > 0 ? 0 : rc;
    state = get_be32(v), order = (int64_t)get_be64(v + 4);
    rocksdb_free(v);
  }
  skey ks = key_state(state, job);
  rocksdb_writebatch_delete_cf(b, s->cf[CF_JOBS], ks.b, ks.n);
  if (order >= 0) {
    skey kq = key_queue(order, job);
    rocksdb_writebatch_delete_cf(b, s->cf[CF_JOBS], kq.b, kq.n);
  }
  return 0;
}

// Adds the deletion of every key of one job in [tag J, next) of a family to b.
static void delete_prefix(store *s, rocksdb_writebatch_t *b, int cf, int tag, const char *job) {
  skey lo = {.n = 0};
  if (tag) lo.b[lo.n++] = (char)tag;
  key_job(&lo, job);
  skey hi = key_next(lo);
  rocksdb_writebatch_delete_range_cf(b, s->cf[cf], lo.b, lo.n, hi.b, hi.n);
}

static int batch_put(store *s, rocksdb_writebatch_t *b, const store_op *o, seen *sn, eng_err *e) {
  int rc = unindex(s, b, o->job, sn, o->fresh, e);
  if (rc) return rc;
  skey h = {.n = 0};
  key_be32(&h, o->state);
  key_be64(&h, (uint64_t)o->order);
  skey kr = key_record(o->job), ks = key_state(o->state, o->job);
  // The record is the header and the caller's bytes, without a copy.
  rocksdb_writebatch_putv_cf(b, s->cf[CF_JOBS], 1, (const char *[]){kr.b}, (const size_t[]){kr.n}, 2,
                             (const char *[]){h.b, (const char *)o->bytes}, (const size_t[]){HEADER, o->n});
  rocksdb_writebatch_put_cf(b, s->cf[CF_JOBS], ks.b, ks.n, h.b + 4, 8);
  if (o->order >= 0) {
    skey kq = key_queue(o->order, o->job);
    rocksdb_writebatch_put_cf(b, s->cf[CF_JOBS], kq.b, kq.n, h.b, 4);
  }
  *sn = (seen){o->job, 1, o->state, o->order};
  return 0;
}

static int batch_delete(store *s, rocksdb_writebatch_t *b, const store_op *o, seen *sn, eng_err *e) {
  int rc = unindex(s, b, o->job, sn, 0, e);
  if (rc) return rc;
  delete_prefix(s, b, CF_JOBS, 'R', o->job);
  delete_prefix(s, b, CF_JOBS, 'C', o->job);
  delete_prefix(s, b, CF_EVENTS, 0, o->job);
  delete_prefix(s, b, CF_CKPT, 'M', o->job);
  delete_prefix(s, b, CF_CKPT, 'P', o->job);
  delete_prefix(s, b, CF_CKPT, 'D', o->job);
  *sn = (seen){o->job, 0, 0, -1};
  return 0;
}

int store_ops_write(store *s, const store_op *ops, size_t n, eng_err *e) {
  for (size_t i = 0; i < n; i++) {
    int rc = store_job_check(ops[i].job, e);
    if (rc) return rc;
  }
  size_t cap = 4;
  while (cap < 2 * n) cap *= 2;
  seen *tab = calloc(cap, sizeof *tab);
  if (!tab) return eng_err_set(e, ENG_ENOMEM, "cannot allocate a batch of %zu writes", n);
  int rc = store_enter(s, e);
  if (rc) {
    free(tab);
    return rc;
  }
  // meta_mu: an index is read and rewritten as one step.
  pthread_mutex_lock(&s->meta_mu);
  rocksdb_writebatch_t *b = rocksdb_writebatch_create();
  for (size_t i = 0; i < n && !rc; i++) {
    const store_op *o = &ops[i];
    switch (o->kind) {
    case STORE_OP_JOB_PUT: rc = batch_put(s, b, o, seen_slot(tab, cap, o->job), e); break;
    case STORE_OP_JOB_DELETE: rc = batch_delete(s, b, o, seen_slot(tab, cap, o->job), e); break;
    case STORE_OP_EVENT_PUT: {
      skey k = store_event_key(o->job, o->seq);
      rocksdb_writebatch_put_cf(b, s->cf[CF_EVENTS], k.b, k.n, o->bytes, o->n);
      break;
    }
    }
  }
  if (!rc) {
    char *err = NULL;
    rocksdb_write(s->db, s->w_rec, b, &err);
    if (err) rc = store_rocks_err(s, err, 1, e, n == 1 ? "writing job \"%s\"" : "writing job \"%s\" and others",
                                  ops[0].job);
  }
  rocksdb_writebatch_destroy(b);
  pthread_mutex_unlock(&s->meta_mu);
  for (size_t i = 0; i < n && !rc; i++) // the deleted jobs' checkpoint space
    if (ops[i].kind == STORE_OP_JOB_DELETE) {
      skey lo = key_tag('D');
      key_job(&lo, ops[i].job);
      skey hi = key_next(lo);
      store_reclaim(s, CF_CKPT, &lo, &hi);
    }
  store_leave(s);
  free(tab);
  return rc;
}

int store_job_put(store *s, const char *job, const void *rec, size_t n, uint32_t state, int64_t order,
                  eng_err *e) {
  store_op op = {.kind = STORE_OP_JOB_PUT, .job = job, .bytes = rec, .n = n, .state = state, .order = order};
  return store_ops_write(s, &op, 1, e);
}

int store_job_get(store *s, const char *job, void **rec, size_t *n, uint32_t *state, int64_t *order,
                  eng_err *e) {
  int rc = store_job_check(job, e);
  if (rc || (rc = store_enter(s, e))) return rc;
  char *v;
  size_t vn;
  rc = read_record(s, job, &v, &vn, e);
  store_leave(s);
  if (rc) return rc;
  *n = vn - HEADER;
  *rec = malloc(*n ? *n : 1);
  if (!*rec) {
    rocksdb_free(v);
    return eng_err_set(e, ENG_ENOMEM, "job \"%s\": cannot allocate %zu bytes", job, *n);
  }
  memcpy(*rec, v + HEADER, *n);
  if (state) *state = get_be32(v);
  if (order) *order = (int64_t)get_be64(v + 4);
  rocksdb_free(v);
  return 0;
}

int store_job_delete(store *s, const char *job, eng_err *e) {
  store_op op = {.kind = STORE_OP_JOB_DELETE, .job = job};
  return store_ops_write(s, &op, 1, e);
}

typedef struct hit {
  char job[STORE_JOB_MAX + 1];
  uint32_t state;
  int64_t order;
} hit;

// Collects the index entries under prefix lo, then calls fn outside the
// store, so fn may call the store itself.
static int scan(store *s, skey lo, int by_state, store_job_fn fn, void *ctx, eng_err *e) {
  int rc = store_enter(s, e);
  if (rc) return rc;
  skey hi = key_next(lo);
  rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
  rocksdb_readoptions_set_iterate_upper_bound(ro, hi.b, hi.n);
  rocksdb_iterator_t *it = rocksdb_create_iterator_cf(s->db, ro, s->cf[CF_JOBS]);
  hit *hits = NULL;
  size_t count = 0, cap = 0;
  for (rocksdb_iter_seek(it, lo.b, lo.n); rocksdb_iter_valid(it) && !rc; rocksdb_iter_next(it)) {
    size_t kn, vn;
    const char *k = rocksdb_iter_key(it, &kn), *v = rocksdb_iter_value(it, &vn);
    size_t at = by_state ? 5 : 9;
    if (count == cap) {
      cap = cap ? 2 * cap : 64;
      hit *grown = realloc(hits, cap * sizeof *hits);
      if (!grown) {
        rc = eng_err_set(e, ENG_ENOMEM, "%s: cannot allocate a job scan of %zu entries", s->dir, cap);
        break;
      }
      hits = grown;
    }
    hit *h = &hits[count];
    if (kn < at || get_job(k + at, kn - at, h->job) != kn - at || vn != (by_state ? 8u : 4u)) {
      rc = eng_err_set(e, STORE_ECORRUPT, "%s: malformed job index entry (%zu-byte key)", s->dir, kn);
      break;
    }
    h->state = by_state ? get_be32(k + 1) : get_be32(v);
    h->order = (int64_t)(by_state ? get_be64(v) : get_be64(k + 1));
    count++;
  }
  char *err = NULL;
  rocksdb_iter_get_error(it, &err);
  rocksdb_iter_destroy(it);
  rocksdb_readoptions_destroy(ro);
  if (err && !rc) rc = store_rocks_err(s, err, 0, e, "%s: scanning jobs", s->dir);
  else if (err) rocksdb_free(err);
  store_leave(s);
  for (size_t i = 0; i < count && !rc; i++) rc = fn(ctx, hits[i].job, hits[i].state, hits[i].order);
  free(hits);
  return rc;
}

int store_job_scan_state(store *s, uint32_t state, store_job_fn fn, void *ctx, eng_err *e) {
  skey lo = key_tag('S');
  key_be32(&lo, state);
  return scan(s, lo, 1, fn, ctx, e);
}

int store_job_scan_queue(store *s, store_job_fn fn, void *ctx, eng_err *e) {
  return scan(s, key_tag('Q'), 0, fn, ctx, e);
}
