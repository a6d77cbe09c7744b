// Internals shared by the storage sources: the store itself, the RocksDB
// handles, key encoding and the enter/leave discipline around RocksDB calls.
//
// Keys (every integer big-endian, so byte order is numeric order; a job id
// J is written as one length byte and its characters):
//   default  "traind.format"            -> decimal format version
//   jobs     'R' J                      -> state u32, order i64, record bytes
//            'S' state J                -> ""   (state index)
//            'Q' order J                -> ""   (queue index, order >= 0)
//            'C' J                      -> step (last committed checkpoint)
//   events   J seq                      -> event bytes
//   ckpt     'M' J step                 -> manifest (store_manifest.c)
//            'P' J step attempt         -> ""   (checkpoint being written)
//            'D' J step attempt name    -> shard bytes
//   act      J step boundary micro      -> activation bytes
// A checkpoint's attempt (a RocksDB sequence number taken at begin) keeps a
// re-save of the same step apart from the committed one until it commits.
#ifndef TRAIND_STORE_IMPL_H
#define TRAIND_STORE_IMPL_H

#include <pthread.h>
#include <rocksdb/c.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "common/worker.h"
#include "store.h"

enum { CF_JOBS, CF_EVENTS, CF_CKPT, CF_ACT, CF_COUNT };

// Threads that put and get the chunks of one spilled value alongside the
// caller (store_act.c).
enum { STORE_IO_THREADS = 3 };

struct store {
  char dir[4096];
  store_options opt;
  // Readers: every operation. Writer: reopening and closing the database.
  pthread_rwlock_t lock;
  // Serialises read-modify-write sequences: a job's indexes, a job's "last
  // checkpoint" field, checkpoint attempts.
  pthread_mutex_t meta_mu;
  rocksdb_t *db; // NULL while closed after a failed reopen
  rocksdb_column_family_handle_t *def, *cf[CF_COUNT];
  rocksdb_options_t *dbo, *cfo[CF_COUNT];
  rocksdb_writeoptions_t *w_sync, *w_nowal;
  rocksdb_writeoptions_t *w_rec; // job records and events: w_sync's, unsynced with group_commit
  rocksdb_readoptions_t *rd;
  // Skips RocksDB's own checksums, for the ckpt family, whose manifests and
  // shards carry the store's crc32c (so a damaged shard is named on load
  // instead of failing every read of its SST block, the open included),
  // and for spill, which lives for one step. Debian's librocksdb computes
  // crc32c without SSE4.2: checking twice halved read rates.
  rocksdb_readoptions_t *rd_nocheck;
  rocksdb_flushoptions_t *flush;
  rocksdb_compactoptions_t *compact;
  uint64_t gen;           // bumped by every reopen: checkpoints begun before it fail
  char *wal_dropped;      // store_wal_dropped's lines, or NULL (store_wal.c)
  atomic_int need_reopen; // a write failed: RocksDB refuses writes until reopened
  eng_worker io[STORE_IO_THREADS];
};

// ---- keys ----------------------------------------------------------------------------
enum { KEY_MAX = 1 + 1 + STORE_JOB_MAX + 8 + 8 + STORE_NAME_MAX + 8 };

typedef struct skey {
  char b[KEY_MAX];
  size_t n;
} skey;

static inline void key_be64(skey *k, uint64_t v) {
  for (int i = 7; i >= 0; i--) k->b[k->n++] = (char)(v >> (8 * i));
}
static inline void key_be32(skey *k, uint32_t v) {
  for (int i = 3; i >= 0; i--) k->b[k->n++] = (char)(v >> (8 * i));
}
static inline void key_str(skey *k, const char *s) {
  size_t n = strlen(s);
  memcpy(k->b + k->n, s, n);
  k->n += n;
}
// The length byte keeps job "a" from being a prefix of job "ab".
static inline void key_job(skey *k, const char *job) {
  k->b[k->n++] = (char)strlen(job);
  key_str(k, job);
}
static inline skey key_tag(char tag) {
  skey k = {.n = 0};
  k.b[k.n++] = tag;
  return k;
}
// The first key after every key that starts with k (k is never all 0xff here).
static inline skey key_next(skey k) {
  while (k.n > 0 && (unsigned char)k.b[k.n - 1] == 0xff) k.n--;
  k.b[k.n - 1]++;
  return k;
}
static inline uint64_t get_be64(const char *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = v << 8 | (unsigned char)p[i];
  return v;
}
static inline uint32_t get_be32(const char *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v = v << 8 | (unsigned char)p[i];
  return v;
}
// Reads a job id at p (length byte first) into out; returns bytes consumed,
// 0 when the key is malformed.
static inline size_t get_job(const char *p, size_t avail, char out[STORE_JOB_MAX + 1]) {
  if (avail < 1) return 0;
  size_t n = (unsigned char)p[0];
  if (n == 0 || n > STORE_JOB_MAX || avail < 1 + n) return 0;
  memcpy(out, p + 1, n);
  out[n] = '\0';
  return 1 + n;
}

// (tag, job, step): the prefix of a checkpoint's manifest, marker or data keys.
static inline skey key_ckpt(char tag, const char *job, int64_t step) {
  skey k = key_tag(tag);
  key_job(&k, job);
  key_be64(&k, (uint64_t)step);
  return k;
}
// The data keys of one attempt at a checkpoint share this prefix.
static inline skey key_ckpt_data(const char *job, int64_t step, uint64_t attempt) {
  skey k = key_ckpt('D', job, step);
  key_be64(&k, attempt);
  return k;
}

// ---- options (store_options.c) ----------------------------------------------------
// Creates s->dbo, s->cfo[], the read, write, flush and compaction options
// from s->opt; free releases whatever exists.
int store_options_make(store *s, eng_err *e);
void store_options_free(store *s);

// ---- the database (store_db.c) --------------------------------------------------
// Opens s->db on s->dir with s->opt (options, format check, collection).
int store_db_open(store *s, eng_err *e);
void store_db_close(store *s);
// store_wal.c: reads back what the open that just succeeded dropped from
// the WAL (store_wal_dropped); store_wal_clear frees it.
void store_wal_scan(store *s);
void store_wal_clear(store *s);
// Every operation runs between enter (shared lock; reopens a database left
// closed by a failed reopen) and leave (releases it, then reopens when a
// write failed during the operation).
int store_enter(store *s, eng_err *e);
void store_leave(store *s);

// ---- errors (store_err.c) ----------------------------------------------------------
// Turns a RocksDB error string into a code and a message "<context>: <kind>:
// <RocksDB's text>", frees it, and when write != 0 asks for a reopen at
// leave (RocksDB stops accepting writes after a failed write or flush).
int store_rocks_err(store *s, char *err, int write, eng_err *e, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
// ENG_EINVAL unless id is 1..max characters of [A-Za-z0-9._-]; `what`
// names it in the message ("job id", "shard name").
int store_id_check(const char *what, const char *id, int max, eng_err *e);
#define store_job_check(job, e) store_id_check("job id", job, STORE_JOB_MAX, e)
// The event log's key: J seq (store_event.c).
skey store_event_key(const char *job, uint64_t seq);
#define store_name_check(name, e) store_id_check("shard name", name, STORE_NAME_MAX, e)

// ---- garbage (store_gc.c) ----------------------------------------------------------
// At open: deletes the shards of checkpoints that never got their manifest,
// and every spilled activation (spill lives for one step of one process).
int store_gc_pending(store *s, eng_err *e);
int store_gc_act_reset(store *s, eng_err *e);

// Compacts [lo, hi) of a family (flushing its memtable first when they
// overlap) so that deleted values drop out, their blobs count as garbage
// and blob files holding nothing else are deleted: they are gone from disk
// when it returns (it waits until RocksDB runs no compaction). Failures
// surface at the next write (the C API's compaction call reports none).
void store_reclaim(store *s, int cf, const skey *lo, const skey *hi);

// ---- manifests (store_manifest.c) ---------------------------------------------------
typedef struct store_shard {
  char name[STORE_NAME_MAX + 1];
  uint64_t size;
  uint32_t crc; // crc32c of the shard's bytes
} store_shard;

typedef struct store_manifest {
  int64_t step;
  uint64_t attempt; // the 'D' keys of this checkpoint carry it
  int count;
  store_shard *shards; // malloc'd
} store_manifest;

// Encodes m into malloc'd bytes (*out, *n).
int store_manifest_encode(const store_manifest *m, char **out, size_t *n, eng_err *e);
// Reads and decodes the manifest of (job, step); 1 when there is none.
// Caller holds the store (enter).
int store_manifest_read(store *s, const char *job, int64_t step, store_manifest *m, eng_err *e);
const store_shard *store_manifest_find(const store_manifest *m, const char *name);
void store_manifest_free(store_manifest *m);

// ---- checkpoints ------------------------------------------------------------------
// Sets the job's 'C' field to its newest checkpoint other than `except`, or
// deletes it when none is left; adds the change to batch. Caller holds meta_mu.
int store_ckpt_fix_latest(store *s, rocksdb_writebatch_t *b, const char *job, int64_t except, eng_err *e);

// ---- fault injection (store_fault.c) ------------------------------------------------
// Raises SIGKILL at the n-th time the named point is reached when the
// environment says TRAIND_STORE_FAULT=<point>:<n> (crash tests only).
void store_fault_point(const char *point);

#endif
