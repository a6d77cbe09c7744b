// Bytes on disk and in memtables per family, from RocksDB's properties: what
// the daemon reports and what the spill test holds to a bound.
#include "store_impl.h"

int store_usage_get(store *s, store_usage *u, eng_err *e) {
  int rc = store_enter(s, e);
  if (rc) return rc;
  *u = (store_usage){0};
  for (int f = 0; f < CF_COUNT && !rc; f++) {
    uint64_t sst = 0, blob = 0, mem = 0;
    if (rocksdb_property_int_cf(s->db, s->cf[f], "rocksdb.live-sst-files-size", &sst) ||
        rocksdb_property_int_cf(s->db, s->cf[f], "rocksdb.live-blob-file-size", &blob) ||
        rocksdb_property_int_cf(s->db, s->cf[f], "rocksdb.size-all-mem-tables", &mem))
      rc = eng_err_set(e, ENG_EIO, "%s: RocksDB did not report its sizes", s->dir);
    u->disk[f] = sst + blob;
    u->memtable[f] = mem;
  }
  store_leave(s);
  return rc;
}
