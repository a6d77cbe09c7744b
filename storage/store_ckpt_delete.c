// Deleting checkpoints: one, or all but the newest k. The manifest goes in
// the same synced batch as the range deletion of the shards (so nothing
// visible ever points at deleted shards), then the range is compacted so its
// blob files are deleted and the space returns.
#include <inttypes.h>
#include <stdlib.h>

#include "store_impl.h"

int store_ckpt_fix_latest(store *s, rocksdb_writebatch_t *b, const char *job, int64_t except, eng_err *e) {
  skey lo = key_tag('M');
  key_job(&lo, job);
  skey hi = key_next(lo);
  rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
  rocksdb_readoptions_set_iterate_lower_bound(ro, lo.b, lo.n);
  rocksdb_readoptions_set_verify_checksums(ro, 0); // see store.rd_nocheck
  rocksdb_iterator_t *it = rocksdb_create_iterator_cf(s->db, ro, s->cf[CF_CKPT]);
  int64_t best = -1;
  for (rocksdb_iter_seek_for_prev(it, hi.b, hi.n); rocksdb_iter_valid(it) && best < 0; rocksdb_iter_prev(it)) {
    size_t kn;
    const char *k = rocksdb_iter_key(it, &kn);
    if (kn != lo.n + 8 || memcmp(k, lo.b, lo.n)) continue;
    int64_t step = (int64_t)get_be64(k + lo.n);
    if (step != except) best = step;
  }
  char *err = NULL;
  rocksdb_iter_get_error(it, &err);
  rocksdb_iter_destroy(it);
  rocksdb_readoptions_destroy(ro);
  if (err) return store_rocks_err(s, err, 0, e, "job \"%s\": finding its newest checkpoint", job);
  skey kc = key_tag('C');
  key_job(&kc, job);
  if (best < 0) {
    rocksdb_writebatch_delete_cf(b, s->cf[CF_JOBS], kc.b, kc.n);
  } else {
    skey v = {.n = 0};
    key_be64(&v, (uint64_t)best);
    rocksdb_writebatch_put_cf(b, s->cf[CF_JOBS], kc.b, kc.n, v.b, v.n);
  }
  return 0;
}

// Adds the deletion of (job, step), manifest and every attempt's shards, to b.
static void delete_one(store *s, rocksdb_writebatch_t *b, const char *job, int64_t step) {
  skey km = key_ckpt('M', job, step), lo = key_ckpt('D', job, step), hi = key_next(lo);
  rocksdb_writebatch_delete_cf(b, s->cf[CF_CKPT], km.b, km.n);
  rocksdb_writebatch_delete_range_cf(b, s->cf[CF_CKPT], lo.b, lo.n, hi.b, hi.n);
}

// The job's 'C' field, -1 when it has none. Caller holds the store.
static int read_latest(store *s, const char *job, int64_t *step, eng_err *e) {
  skey k = key_tag('C');
  key_job(&k, job);
  char *err = NULL;
  size_t n = 0;
  char *v = rocksdb_get_cf(s->db, s->rd, s->cf[CF_JOBS], k.b, k.n, &n, &err);
  if (err) return store_rocks_err(s, err, 0, e, "job \"%s\": reading its last checkpoint", job);
  *step = v && n == 8 ? (int64_t)get_be64(v) : -1;
  rocksdb_free(v);
  return 0;
}

static int write_batch(store *s, rocksdb_writebatch_t *b, const char *job, eng_err *e) {
  char *err = NULL;
  rocksdb_write(s->db, s->w_sync, b, &err);
  return err ? store_rocks_err(s, err, 1, e, "job \"%s\": deleting checkpoints", job) : 0;
}

int store_ckpt_delete(store *s, const char *job, int64_t step, eng_err *e) {
  int rc = store_job_check(job, e);
  if (rc || (rc = store_enter(s, e))) return rc;
  pthread_mutex_lock(&s->meta_mu);
  store_manifest m;
  int64_t latest = -1;
  rc = store_manifest_read(s, job, step, &m, e);
  if (rc == 1) rc = eng_err_set(e, ENG_EINVAL, "job \"%s\" has no checkpoint at step %" PRId64, job, step);
  else if (!rc) store_manifest_free(&m);
  if (!rc) rc = read_latest(s, job, &latest, e);
  rocksdb_writebatch_t *b = rocksdb_writebatch_create();
  if (!rc) {
    delete_one(s, b, job, step);
    if (latest == step) rc = store_ckpt_fix_latest(s, b, job, step, e);
  }
  if (!rc) rc = write_batch(s, b, job, e);
  rocksdb_writebatch_destroy(b);
  pthread_mutex_unlock(&s->meta_mu);
  if (!rc) {
    skey lo = key_ckpt('D', job, step), hi = key_next(lo);
    store_reclaim(s, CF_CKPT, &lo, &hi);
  }
  store_leave(s);
  return rc;
}

int store_ckpt_keep(store *s, const char *job, int k, eng_err *e) {
  if (k < 1) return eng_err_set(e, ENG_EINVAL, "job \"%s\": keeping %d checkpoints (at least 1)", job, k);
  int n = 0;
  int rc = store_ckpt_list(s, job, NULL, 0, &n, e);
  if (rc || n <= k) return rc;
  int64_t *steps = malloc((size_t)n * sizeof *steps);
  if (!steps) return eng_err_set(e, ENG_ENOMEM, "job \"%s\": cannot list %d checkpoints", job, n);
  int got = 0;
  if ((rc = store_ckpt_list(s, job, steps, n, &got, e)) || (rc = store_enter(s, e))) {
    free(steps);
    return rc;
  }
  if (got > n) got = n; // a commit between the two listings: its step is newer and stays
  pthread_mutex_lock(&s->meta_mu);
  int64_t latest = -1;
  rc = read_latest(s, job, &latest, e);
  rocksdb_writebatch_t *b = rocksdb_writebatch_create();
  int deleted = 0;
  for (int i = 0; !rc && i < got - k; i++) {
    if (steps[i] == latest) continue;
    delete_one(s, b, job, steps[i]);
    deleted++;
  }
  if (!rc && deleted) rc = write_batch(s, b, job, e);
  rocksdb_writebatch_destroy(b);
  pthread_mutex_unlock(&s->meta_mu);
  if (!rc && deleted) {
    skey lo = key_ckpt('D', job, steps[0]), hi = key_ckpt('D', job, steps[got - k - 1]);
    hi = key_next(hi);
    store_reclaim(s, CF_CKPT, &lo, &hi);
  }
  store_leave(s);
  free(steps);
  return rc;
}
