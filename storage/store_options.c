// The RocksDB options of the store, each with the reason or the measurement
// behind it. Built once per store and reused by every reopen.
#include "store_impl.h"

void store_options_defaults(store_options *o) {
  o->act_buffer_bytes = (size_t)64 << 20;
  o->act_buffers = 2;
  o->group_commit = 0;
}

// Values of at least this many bytes go to blob files in ckpt and act.
// Measured by `bench_store_rate blob-sweep` (tests/bench/store_rate.c): six
// 16 MiB checkpoints keeping the last two, every value in blob files vs
// every value inline, 2 cores, ext4 on virtio. From 4 KiB up blob files
// wrote faster (4 KiB: 373 vs 313 MiB/s; 64 KiB: 425 vs 372) and wrote
// 1.0 byte per byte stored against 1.85 inline (compaction rewrites inline
// values, never blobs); cold reads were 0.6-0.9x of inline (4 KiB: 729 vs
// 1193 MiB/s; 64 KiB: 1124 vs 1327). At 1 KiB writes tied (250 vs 236) and
// reads favoured inline 0.6x; at 256 B inline won both. The engine's shards
// are 64 KiB and up except "meta", which stays inline.
enum { MIN_BLOB_SIZE = 4096 };

static rocksdb_options_t *family_options(size_t buffer, int buffers, int blobs) {
  rocksdb_options_t *o = rocksdb_options_create();
  rocksdb_options_set_write_buffer_size(o, buffer);
  rocksdb_options_set_max_write_buffer_number(o, buffers);
  if (blobs) {
    // Neither keys nor the few small values in these SST files compress.
    rocksdb_options_set_compression(o, rocksdb_no_compression);
    rocksdb_options_set_enable_blob_files(o, 1);
    rocksdb_options_set_min_blob_size(o, MIN_BLOB_SIZE);
    // Weights and activations do not compress; their blob files die whole
    // (a checkpoint's or a step's values are flushed together and deleted
    // together), so relocating live blobs (blob GC) would only copy bytes.
    rocksdb_options_set_blob_compression_type(o, rocksdb_no_compression);
    rocksdb_options_set_enable_blob_gc(o, 0);
  }
  return o;
}

int store_options_make(store *s, eng_err *e) {
  rocksdb_options_t *base = rocksdb_options_create();
  rocksdb_options_set_create_if_missing(base, 1);
  // jobs and events are small and written through the WAL; without a cap
  // their unflushed memtables would pin every WAL file written since.
  rocksdb_options_set_max_total_wal_size(base, (uint64_t)64 << 20);
  // Bounded disk for the database's own logs: warnings only in LOG (at the
  // info level, spill's flushes and compactions wrote 20 KiB per step), at
  // most 4 LOG files of 4 MiB, and a MANIFEST (which grows with every flush
  // and compaction) rewritten once it reaches 16 MiB.
  rocksdb_options_set_info_log_level(base, 2);
  rocksdb_options_set_keep_log_file_num(base, 4);
  rocksdb_options_set_max_log_file_size(base, (size_t)4 << 20);
  rocksdb_options_set_max_manifest_file_size(base, (size_t)16 << 20);
  // Spill and checkpoints write tens of MiB per flush, and every flush ends
  // in an fsync: two flush threads let one copy while the other syncs, and
  // writeback started every 8 MiB keeps that final sync short.
  rocksdb_options_set_max_background_flushes(base, 2);
  rocksdb_options_set_max_background_compactions(base, 1);
  rocksdb_options_set_bytes_per_sync(base, (uint64_t)8 << 20);
  // Big values are read front to back: let the kernel read ahead, and map
  // the files, which spares one copy per read (the blob reader copies out
  // of the mapping instead of out of a pread buffer it copied into; warm
  // spill reads went from about 2.7 to 3.5 GB/s in tests/bench/store_rate.c).
  rocksdb_options_set_advise_random_on_open(base, 0);
  rocksdb_options_set_allow_mmap_reads(base, 1);
  // Point-in-time recovery: a WAL torn by SIGKILL loses its tail, not the database.
  rocksdb_options_set_wal_recovery_mode(base, 2);
  // Close must not flush: the only unflushed (WAL-less) data are spilled
  // activations and shards of uncommitted checkpoints, both garbage by then.
  s->dbo = rocksdb_options_create();
  char *err = NULL;
  rocksdb_get_options_from_string(base, "avoid_flush_during_shutdown=true", s->dbo, &err);
  rocksdb_options_destroy(base);
  if (err) {
    eng_err_set(e, ENG_EINVAL, "store options: %s", err);
    rocksdb_free(err);
    return ENG_EINVAL;
  }
  s->cfo[CF_JOBS] = family_options((size_t)4 << 20, 2, 0);
  s->cfo[CF_EVENTS] = family_options((size_t)4 << 20, 2, 0);
  // Up to two 64 MiB memtables of shards before a flush: a checkpoint never
  // holds more than that (plus one shard) in host memory on top of the model.
  s->cfo[CF_CKPT] = family_options((size_t)64 << 20, 2, 1);
  s->cfo[CF_ACT] = family_options(s->opt.act_buffer_bytes, s->opt.act_buffers, 1);
  s->w_sync = rocksdb_writeoptions_create();
  rocksdb_writeoptions_set_sync(s->w_sync, 1);
  s->w_nowal = rocksdb_writeoptions_create();
  rocksdb_writeoptions_disable_WAL(s->w_nowal, 1);
  s->w_rec = rocksdb_writeoptions_create();
  rocksdb_writeoptions_set_sync(s->w_rec, !s->opt.group_commit);
  s->rd = rocksdb_readoptions_create();
  s->rd_nocheck = rocksdb_readoptions_create();
  rocksdb_readoptions_set_verify_checksums(s->rd_nocheck, 0);
  s->flush = rocksdb_flushoptions_create();
  rocksdb_flushoptions_set_wait(s->flush, 1);
  s->compact = rocksdb_compactoptions_create();
  // kForceOptimized: also rewrite the bottommost level, where the entries
  // that reference deleted blobs end up, so their blob files can go.
  rocksdb_compactoptions_set_bottommost_level_compaction(s->compact, 3);
  return 0;
}

void store_options_free(store *s) {
  if (s->dbo) rocksdb_options_destroy(s->dbo);
  for (int i = 0; i < CF_COUNT; i++)
    if (s->cfo[i]) rocksdb_options_destroy(s->cfo[i]);
  if (s->w_sync) rocksdb_writeoptions_destroy(s->w_sync);
  if (s->w_nowal) rocksdb_writeoptions_destroy(s->w_nowal);
  if (s->w_rec) rocksdb_writeoptions_destroy(s->w_rec);
  if (s->rd) rocksdb_readoptions_destroy(s->rd);
  if (s->rd_nocheck) rocksdb_readoptions_destroy(s->rd_nocheck);
  if (s->flush) rocksdb_flushoptions_destroy(s->flush);
  if (s->compact) rocksdb_compactoptions_destroy(s->compact);
}
