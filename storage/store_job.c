// Job records and their two indexes, kept in step in one synced batch:
//   'R' J             -> state u32, order i64, record
//   'S' state J       -> order i64      (by state)
//   'Q' order J       -> state u32      (queue, only when order >= 0)
// so that a scan of either index needs no second read.
#include <inttypes.h>
#include <stdlib.h>

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

// Adds the deletion of the job's index entries, as its stored record names
// them, to b: nothing when the job has no record yet. 0 or an error.
static int unindex(store *s, rocksdb_writebatch_t *b, const char *job, eng_err *e) {
  char *v;
  size_t n;
  int rc = read_record(s, job, &v, &n, e);
  if (rc) return rc > 0 ? 0 : rc;
  skey ks = key_state(get_be32(v), job);
  rocksdb_writebatch_delete_cf(b, s->cf[CF_JOBS], ks.b, ks.n);
  int64_t order = (int64_t)get_be64(v + 4);
  if (order >= 0) {
    skey kq = key_queue(order, job);
    rocksdb_writebatch_delete_cf(b, s->cf[CF_JOBS], kq.b, kq.n);
  }
  rocksdb_free(v);
  return 0;
}

int store_job_put(store *s, const char *job, const void *rec, size_t n, uint32_t state, int64_t order,
                  eng_err *e) {
  int rc = store_job_check(job, e);
  if (rc) return rc;
  char *val = malloc(HEADER + n);
  if (!val) return eng_err_set(e, ENG_ENOMEM, "job \"%s\": cannot allocate %zu bytes", job, HEADER + n);
  skey h = {.n = 0};
  key_be32(&h, state);
  key_be64(&h, (uint64_t)order);
  memcpy(val, h.b, HEADER);
  if (n) memcpy(val + HEADER, rec, n);
  if ((rc = store_enter(s, e))) {
    free(val);
    return rc;
  }
  pthread_mutex_lock(&s->meta_mu);
  rocksdb_writebatch_t *b = rocksdb_writebatch_create();
  rc = unindex(s, b, job, e);
  if (!rc) {
    skey kr = key_record(job), ks = key_state(state, job);
    rocksdb_writebatch_put_cf(b, s->cf[CF_JOBS], kr.b, kr.n, val, HEADER + n);
    rocksdb_writebatch_put_cf(b, s->cf[CF_JOBS], ks.b, ks.n, h.b + 4, 8);
    if (order >= 0) {
      skey kq = key_queue(order, job);
      rocksdb_writebatch_put_cf(b, s->cf[CF_JOBS], kq.b, kq.n, h.b, 4);
    }
    char *err = NULL;
    rocksdb_write(s->db, s->w_rec, b, &err);
    if (err) rc = store_rocks_err(s, err, 1, e, "writing job \"%s\"", job);
  }
  rocksdb_writebatch_destroy(b);
  pthread_mutex_unlock(&s->meta_mu);
  store_leave(s);
  free(val);
  return rc;
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

// Adds the deletion of every key of one job in [tag J, next) of a family to b.
static void delete_prefix(store *s, rocksdb_writebatch_t *b, int cf, int tag, const char *job) {
  skey lo = {.n = 0};
  if (tag) lo.b[lo.n++] = (char)tag;
  key_job(&lo, job);
  skey hi = key_next(lo);
  rocksdb_writebatch_delete_range_cf(b, s->cf[cf], lo.b, lo.n, hi.b, hi.n);
}

int store_job_delete(store *s, const char *job, eng_err *e) {
  int rc = store_job_check(job, e);
  if (rc || (rc = store_enter(s, e))) return rc;
  pthread_mutex_lock(&s->meta_mu);
  rocksdb_writebatch_t *b = rocksdb_writebatch_create();
  rc = unindex(s, b, job, e);
  if (!rc) {
    delete_prefix(s, b, CF_JOBS, 'R', job);
    delete_prefix(s, b, CF_JOBS, 'C', job);
    delete_prefix(s, b, CF_EVENTS, 0, job);
    delete_prefix(s, b, CF_CKPT, 'M', job);
    delete_prefix(s, b, CF_CKPT, 'P', job);
    delete_prefix(s, b, CF_CKPT, 'D', job);
    char *err = NULL;
    rocksdb_write(s->db, s->w_rec, b, &err);
    if (err) rc = store_rocks_err(s, err, 1, e, "deleting job \"%s\"", job);
  }
  rocksdb_writebatch_destroy(b);
  pthread_mutex_unlock(&s->meta_mu);
  if (!rc) {
    skey lo = key_tag('D');
    key_job(&lo, job);
    skey hi = key_next(lo);
    store_reclaim(s, CF_CKPT, &lo, &hi);
  }
  store_leave(s);
  return rc;
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
