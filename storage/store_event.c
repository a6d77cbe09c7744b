// The per-job event log: J seq -> event. Its one writer (the daemon's loop)
// numbers the events; the last number is found by seeking backwards.
#include <inttypes.h>

#include "store_impl.h"

skey store_event_key(const char *job, uint64_t seq) {
  skey k = {.n = 0};
  key_job(&k, job);
  key_be64(&k, seq);
  return k;
}

// The job's last sequence number, 0 when it has no events.
static int last_seq(store *s, const char *job, uint64_t *seq, eng_err *e) {
  skey lo = store_event_key(job, 0), hi = store_event_key(job, UINT64_MAX);
  rocksdb_iterator_t *it = rocksdb_create_iterator_cf(s->db, s->rd, s->cf[CF_EVENTS]);
  rocksdb_iter_seek_for_prev(it, hi.b, hi.n);
  *seq = 0;
  if (rocksdb_iter_valid(it)) {
    size_t kn;
    const char *k = rocksdb_iter_key(it, &kn);
    if (kn == lo.n && !memcmp(k, lo.b, lo.n - 8)) *seq = get_be64(k + lo.n - 8);
  }
  char *err = NULL;
  rocksdb_iter_get_error(it, &err);
  rocksdb_iter_destroy(it);
  return err ? store_rocks_err(s, err, 0, e, "job \"%s\": reading the last event", job) : 0;
}

int store_event_put(store *s, const char *job, uint64_t seq, const void *ev, size_t n, eng_err *e) {
  store_op op = {.kind = STORE_OP_EVENT_PUT, .job = job, .bytes = ev, .n = n, .seq = seq};
  return store_ops_write(s, &op, 1, e);
}

int store_event_last(store *s, const char *job, uint64_t *seq, eng_err *e) {
  int rc = store_job_check(job, e);
  if (rc || (rc = store_enter(s, e))) return rc;
  rc = last_seq(s, job, seq, e);
  store_leave(s);
  return rc;
}

int store_event_scan(store *s, const char *job, uint64_t from, store_event_fn fn, void *ctx, eng_err *e) {
  int rc = store_job_check(job, e);
  if (rc || (rc = store_enter(s, e))) return rc;
  skey lo = store_event_key(job, from), hi = {.n = 0};
  key_job(&hi, job);
  hi = key_next(hi);
  rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
  rocksdb_readoptions_set_iterate_upper_bound(ro, hi.b, hi.n);
  rocksdb_iterator_t *it = rocksdb_create_iterator_cf(s->db, ro, s->cf[CF_EVENTS]);
  for (rocksdb_iter_seek(it, lo.b, lo.n); rocksdb_iter_valid(it) && !rc; rocksdb_iter_next(it)) {
    size_t kn, vn;
    const char *k = rocksdb_iter_key(it, &kn), *v = rocksdb_iter_value(it, &vn);
    if (kn != lo.n) {
      rc = eng_err_set(e, STORE_ECORRUPT, "job \"%s\": malformed event key of %zu bytes", job, kn);
      break;
    }
    rc = fn(ctx, get_be64(k + kn - 8), v, vn);
  }
  char *err = NULL;
  rocksdb_iter_get_error(it, &err);
  rocksdb_iter_destroy(it);
  rocksdb_readoptions_destroy(ro);
  if (err && !rc) rc = store_rocks_err(s, err, 0, e, "job \"%s\": scanning events from %" PRIu64, job, from);
  else if (err) rocksdb_free(err);
  store_leave(s);
  return rc;
}
