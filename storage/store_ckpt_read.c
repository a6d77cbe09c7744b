// Reading checkpoints: the latest, the list, a shard's size, a shard's bytes
// (checked against the manifest's crc32c), and a whole-checkpoint check.
#include <inttypes.h>
#include <stdlib.h>

#include "common/crc32c.h"
#include "store_impl.h"

#define CKPT_FMT "checkpoint of job \"%s\" at step %" PRId64

int store_ckpt_latest(store *s, const char *job, int64_t *step, eng_err *e) {
  int rc = store_job_check(job, e);
  if (rc || (rc = store_enter(s, e))) return rc;
  skey k = key_tag('C');
  key_job(&k, job);
  char *err = NULL;
  size_t n = 0;
  char *v = rocksdb_get_cf(s->db, s->rd, s->cf[CF_JOBS], k.b, k.n, &n, &err);
  store_leave(s);
  if (err) return store_rocks_err(s, err, 0, e, "job \"%s\": reading its last checkpoint", job);
  if (!v) return 1;
  if (n == 8) *step = (int64_t)get_be64(v);
  rocksdb_free(v);
  return n == 8 ? 0 : eng_err_set(e, STORE_ECORRUPT, "job \"%s\": last-checkpoint field of %zu bytes", job, n);
}

int store_ckpt_list(store *s, const char *job, int64_t *steps, int cap, int *n, eng_err *e) {
  *n = 0;
  int rc = store_job_check(job, e);
  if (rc || (rc = store_enter(s, e))) return rc;
  skey lo = key_tag('M');
  key_job(&lo, job);
  skey hi = key_next(lo);
  rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
  rocksdb_readoptions_set_iterate_upper_bound(ro, hi.b, hi.n);
  rocksdb_readoptions_set_verify_checksums(ro, 0); // see store.rd_nocheck
  rocksdb_iterator_t *it = rocksdb_create_iterator_cf(s->db, ro, s->cf[CF_CKPT]);
  for (rocksdb_iter_seek(it, lo.b, lo.n); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
    size_t kn;
    const char *k = rocksdb_iter_key(it, &kn);
    if (kn != lo.n + 8) {
      rc = eng_err_set(e, STORE_ECORRUPT, "job \"%s\": malformed manifest key of %zu bytes", job, kn);
      break;
    }
    if (*n < cap) steps[*n] = (int64_t)get_be64(k + lo.n);
    (*n)++;
  }
  char *err = NULL;
  rocksdb_iter_get_error(it, &err);
  rocksdb_iter_destroy(it);
  rocksdb_readoptions_destroy(ro);
  if (err && !rc) rc = store_rocks_err(s, err, 0, e, "job \"%s\": listing checkpoints", job);
  else if (err) rocksdb_free(err);
  store_leave(s);
  return rc;
}

// The manifest of (job, step) with its entry for name. Caller holds the store.
static int find_shard(store *s, const char *job, int64_t step, const char *name, store_manifest *m,
                      const store_shard **sh, eng_err *e) {
  int rc = store_manifest_read(s, job, step, m, e);
  if (rc == 1) return eng_err_set(e, ENG_EINVAL, "job \"%s\" has no checkpoint at step %" PRId64, job, step);
  if (rc) return rc;
  if ((*sh = store_manifest_find(m, name))) return 0;
  store_manifest_free(m);
  return eng_err_set(e, ENG_EINVAL, CKPT_FMT " has no shard \"%s\"", job, step, name);
}

// Reads one shard, checks its size and crc32c, and copies it to dst when
// dst is not NULL. Every failure names the job, the step and the shard.
static int read_shard(store *s, const char *job, const store_manifest *m, const store_shard *sh, void *dst,
                      eng_err *e) {
  skey k = key_ckpt_data(job, m->step, m->attempt);
  key_str(&k, sh->name);
  char *err = NULL;
  rocksdb_pinnableslice_t *p = rocksdb_get_pinned_cf(s->db, s->rd_nocheck, s->cf[CF_CKPT], k.b, k.n, &err);
  if (err)
    return store_rocks_err(s, err, 0, e, CKPT_FMT ": shard \"%s\"", job, m->step, sh->name);
  if (!p)
    return eng_err_set(e, STORE_ECORRUPT, CKPT_FMT ": shard \"%s\" is listed in the manifest but missing",
                       job, m->step, sh->name);
  size_t n;
  const char *v = rocksdb_pinnableslice_value(p, &n);
  int rc = 0;
  if (n != sh->size)
    rc = eng_err_set(e, STORE_ECORRUPT, CKPT_FMT ": shard \"%s\" has %zu bytes, its manifest says %" PRIu64,
                     job, m->step, sh->name, n, sh->size);
  else if (eng_crc32c(0, v, n) != sh->crc)
    rc = eng_err_set(e, STORE_ECORRUPT, CKPT_FMT ": shard \"%s\" fails its crc32c checksum", job, m->step,
                     sh->name);
  else if (dst)
    memcpy(dst, v, n);
  rocksdb_pinnableslice_destroy(p);
  return rc;
}

int store_ckpt_size(store *s, const char *job, int64_t step, const char *name, size_t *n, eng_err *e) {
  int rc = store_job_check(job, e);
  if (rc || (rc = store_enter(s, e))) return rc;
  store_manifest m;
  const store_shard *sh;
  if (!(rc = find_shard(s, job, step, name, &m, &sh, e))) {
    *n = sh->size;
    store_manifest_free(&m);
  }
  store_leave(s);
  return rc;
}

int store_ckpt_load(store *s, const char *job, int64_t step, const char *name, void *data, size_t n,
                    eng_err *e) {
  int rc = store_job_check(job, e);
  if (rc || (rc = store_enter(s, e))) return rc;
  store_manifest m;
  const store_shard *sh;
  if (!(rc = find_shard(s, job, step, name, &m, &sh, e))) {
    if (sh->size != n)
      rc = eng_err_set(e, ENG_EINVAL, CKPT_FMT ": shard \"%s\" has %" PRIu64 " bytes, the caller expects %zu",
                       job, step, name, sh->size, n);
    else
      rc = read_shard(s, job, &m, sh, data, e);
    store_manifest_free(&m);
  }
  store_leave(s);
  return rc;
}

int store_ckpt_verify(store *s, const char *job, int64_t step, int *shards, eng_err *e) {
  int rc = store_job_check(job, e);
  if (rc || (rc = store_enter(s, e))) return rc;
  store_manifest m;
  rc = store_manifest_read(s, job, step, &m, e);
  if (rc == 1) rc = eng_err_set(e, ENG_EINVAL, "job \"%s\" has no checkpoint at step %" PRId64, job, step);
  if (!rc) {
    for (int i = 0; i < m.count && !rc; i++) rc = read_shard(s, job, &m, &m.shards[i], NULL, e);
    if (shards) *shards = m.count;
    store_manifest_free(&m);
  }
  store_leave(s);
  return rc;
}
