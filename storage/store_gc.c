// Garbage: checkpoints that never got their manifest, spill left by a
// previous process, and the compaction that turns deleted blob values into
// deleted blob files.
#include <time.h>

#include "store_impl.h"

void store_reclaim(store *s, int cf, const skey *lo, const skey *hi) {
  rocksdb_compact_range_cf_opt(s->db, s->cf[cf], s->compact, lo->b, lo->n, hi->b, hi->n);
  // The compaction call can return before the compaction's thread has
  // deleted the files it made obsolete (it does so after marking the
  // compaction done, without the DB mutex); RocksDB counts the compaction
  // as running until they are gone. On a loaded machine the spill test saw
  // a dropped step's blob files still on disk after the drop returned.
  uint64_t running;
  while (!rocksdb_property_int(s->db, "rocksdb.num-running-compactions", &running) && running > 0)
    nanosleep(&(struct timespec){0, 100000}, NULL);
}

// Every begin wrote a synced 'P' J step attempt marker before its first
// shard, and every commit deleted it in the batch that wrote the manifest:
// a marker left over names exactly the data of an interrupted checkpoint.
int store_gc_pending(store *s, eng_err *e) {
  skey lo = key_tag('P'), hi = key_next(lo);
  rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
  rocksdb_readoptions_set_iterate_upper_bound(ro, hi.b, hi.n);
  rocksdb_readoptions_set_verify_checksums(ro, 0); // see store.rd_nocheck
  rocksdb_iterator_t *it = rocksdb_create_iterator_cf(s->db, ro, s->cf[CF_CKPT]);
  rocksdb_writebatch_t *b = rocksdb_writebatch_create();
  int found = 0, rc = 0;
  for (rocksdb_iter_seek(it, lo.b, lo.n); rocksdb_iter_valid(it) && !rc; rocksdb_iter_next(it)) {
    size_t kn;
    const char *k = rocksdb_iter_key(it, &kn);
    char job[STORE_JOB_MAX + 1];
    size_t j = get_job(k + 1, kn - 1, job);
    if (!j || kn != 1 + j + 16) {
      rc = eng_err_set(e, STORE_ECORRUPT, "%s: malformed checkpoint marker key of %zu bytes", s->dir, kn);
      break;
    }
    int64_t step = (int64_t)get_be64(k + 1 + j);
    uint64_t attempt = get_be64(k + 1 + j + 8);
    store_manifest m;
    rc = store_manifest_read(s, job, step, &m, e);
    if (rc < 0) break;
    int committed = rc == 0 && m.attempt == attempt;
    if (rc == 0) store_manifest_free(&m);
    rc = 0;
    if (!committed) {
      skey dlo = key_ckpt_data(job, step, attempt), dhi = key_next(dlo);
      rocksdb_writebatch_delete_range_cf(b, s->cf[CF_CKPT], dlo.b, dlo.n, dhi.b, dhi.n);
    }
    rocksdb_writebatch_delete_cf(b, s->cf[CF_CKPT], k, kn);
    found++;
  }
  char *err = NULL;
  rocksdb_iter_get_error(it, &err);
  rocksdb_iter_destroy(it);
  rocksdb_readoptions_destroy(ro);
  if (err && !rc) rc = store_rocks_err(s, err, 0, e, "%s: scanning unfinished checkpoints", s->dir);
  else if (err) rocksdb_free(err);
  if (!rc && found) {
    rocksdb_write(s->db, s->w_sync, b, &err);
    if (err) rc = store_rocks_err(s, err, 1, e, "%s: deleting %d unfinished checkpoints", s->dir, found);
  }
  rocksdb_writebatch_destroy(b);
  if (!rc && found) {
    skey dlo = key_tag('D'), dhi = key_next(dlo);
    store_reclaim(s, CF_CKPT, &dlo, &dhi);
  }
  return rc;
}

int store_gc_act_reset(store *s, eng_err *e) {
  // Activation keys start with a job id's length byte, 1..STORE_JOB_MAX.
  skey lo = {.b = {0}, .n = 1}, hi = {.b = {(char)0xff}, .n = 1};
  char *err = NULL;
  rocksdb_delete_range_cf(s->db, s->w_nowal, s->cf[CF_ACT], lo.b, lo.n, hi.b, hi.n, &err);
  if (err) return store_rocks_err(s, err, 1, e, "%s: clearing spilled activations", s->dir);
  store_reclaim(s, CF_ACT, &lo, &hi);
  return 0;
}
