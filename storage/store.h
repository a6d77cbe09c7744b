// libtraind_store: the daemon's durable state in one RocksDB database
// (DESIGN §4). Column families:
//   jobs    job records (opaque bytes), their state and queue-order indexes,
//           and each job's "last checkpoint" step
//   events  per-job event log, sequence numbers from 1
//   ckpt    checkpoints: shards, a manifest written last, pending markers
//   act     activation spill, not durable, dropped once used
// Job ids are 1..STORE_JOB_MAX bytes of [A-Za-z0-9._-], so that keys and
// error messages can carry them as they are.
//
// Errors: every fallible call returns 0 or a negative code (ENG_E* from
// engine/common/err.h or STORE_E* below) and fills the caller's eng_err with
// a sentence naming the directory, job, step or shard at fault. Nothing here
// prints. A lookup that finds nothing returns 1, not an error.
//
// Threads: every call may be made from any thread. Calls for different jobs
// run concurrently; calls that change one job's record, events or
// checkpoint list are serialised inside the store. One store_ckpt handle is
// used by one thread at a time.
//
// A full disk or another write failure makes RocksDB refuse further writes;
// the store then closes and reopens the database by itself (a checkpoint
// being written at that moment fails and is discarded, spilled activations
// not yet read are lost), so one failed operation never leaves it unusable.
#ifndef TRAIND_STORE_H
#define TRAIND_STORE_H

#include <stddef.h>
#include <stdint.h>

// The engine's API brings eng_err, eng_config and eng_store. Include this
// header as "storage/store.h": a bare "store.h" is the engine's interface.
#include "engine.h"

enum {
  STORE_EBUSY = -101,    // another process (or another handle here) holds the database
  STORE_ENOSPC = -102,   // the filesystem is full (ENOSPC)
  STORE_ECORRUPT = -103, // a checksum failed or a database file is damaged
  STORE_EVERSION = -104, // the database has a format version this build does not know
};

enum { STORE_JOB_MAX = 64, STORE_NAME_MAX = 64, STORE_FORMAT_VERSION = 1 };

// "store in use", "no space left on device (ENOSPC)", ...; falls back to
// eng_err_name for the engine's codes.
const char *store_err_name(int code);

typedef struct store store;

typedef struct store_options {
  // Activation spill: bytes one memtable of the act family holds before it
  // is flushed to a blob file, and how many memtables may exist at once.
  // Host memory used by spill stays under about their product.
  size_t act_buffer_bytes; // default 64 MiB
  int act_buffers;         // default 2
  // Group commit: job records and events are written to the write-ahead log
  // without waiting for the disk, and store_sync makes everything written
  // before it durable with one sync. Default 0: each such write is synced.
  int group_commit;
} store_options;

void store_options_defaults(store_options *o);

// Opens (creating when missing) the database in dir. Refuses, with a code
// and a message and never a crash: a directory another process holds
// (STORE_EBUSY), one it cannot read or create (ENG_EIO), a database without
// the traind format key or with an unknown version (STORE_EVERSION),
// damaged files (STORE_ECORRUPT). Opening collects checkpoints that never
// got their manifest and empties the act family. o may be NULL (defaults).
int store_open(store **out, const char *dir, const store_options *o, eng_err *e);
void store_close(store *s);
// Makes every write made before the call durable (group_commit): one sync of
// the write-ahead log, however many writes it covers.
int store_sync(store *s, eng_err *e);
// What the last open's recovery cut from the write-ahead log. Point-in-time
// recovery (store_options.c) stops at the first WAL record that fails its
// checksum and drops it and everything after it: the writes made last
// before the process ended. RocksDB 7.8's C API reports that nowhere (no
// WAL filter, listener or logger callback); its info log does, at WARN
// ("<dir>/000019.log: dropping 77 bytes; Corruption: checksum mismatch"),
// and the open reads those lines back from <dir>/LOG, which every open
// starts anew. NULL when nothing was dropped; else the lines, each ending
// in '\n', valid until the next reopen or the close.
const char *store_wal_dropped(const store *s);

// ---- jobs ---------------------------------------------------------------------
// A job record is opaque bytes (the daemon encodes it). The store indexes
// it by state (any number the caller uses) and, when order >= 0, by queue
// order (ascending; ties broken by job id). Written with sync, or for
// store_sync to make durable (group_commit); so are deletions and events.
int store_job_put(store *s, const char *job, const void *rec, size_t n, uint32_t state, int64_t order,
                  eng_err *e);
// Returns 1 when there is no such job. *rec is malloc'd (free it); state
// and order may be NULL.
int store_job_get(store *s, const char *job, void **rec, size_t *n, uint32_t *state, int64_t *order,
                  eng_err *e);
// Removes the record, its indexes, its events and its checkpoints.
int store_job_delete(store *s, const char *job, eng_err *e);

// Called per job in index order, after the index was read (fn may call the
// store); a nonzero return stops the scan and is returned by it.
typedef int (*store_job_fn)(void *ctx, const char *job, uint32_t state, int64_t order);
int store_job_scan_state(store *s, uint32_t state, store_job_fn fn, void *ctx, eng_err *e);
int store_job_scan_queue(store *s, store_job_fn fn, void *ctx, eng_err *e);

// ---- several writes at once -----------------------------------------------------
// Job records, deletions and events applied in order as one atomic write
// (one write-ahead-log record: all or none), for group commit, where one
// write per record cost more than the records themselves. A job put or
// deleted twice in ops is indexed as its last write says. Synced, or for
// store_sync to make durable (group_commit).
typedef enum { STORE_OP_JOB_PUT, STORE_OP_JOB_DELETE, STORE_OP_EVENT_PUT } store_op_kind;
typedef struct store_op {
  store_op_kind kind;
  const char *job;
  const void *bytes; // the record (JOB_PUT) or the event (EVENT_PUT)
  size_t n;
  uint32_t state;    // JOB_PUT: as store_job_put takes them
  int64_t order;
  int fresh;         // JOB_PUT: the job has no record yet (its first put), so
                     // no old index entries are read back to be removed
  uint64_t seq;      // EVENT_PUT
} store_op;
int store_ops_write(store *s, const store_op *ops, size_t n, eng_err *e);

// ---- events -------------------------------------------------------------------
// Writes one event at a sequence number its caller keeps (the one writer of
// the job's log: the daemon's loop numbers them 1, 2, ...), replacing one
// there. Synced, or for store_sync to make durable (group_commit).
int store_event_put(store *s, const char *job, uint64_t seq, const void *ev, size_t n, eng_err *e);
// The job's last sequence number (0 when it has no events).
int store_event_last(store *s, const char *job, uint64_t *seq, eng_err *e);
// Calls fn for every event of the job with sequence >= from, in order,
// while reading (fn must not call the store); a nonzero return stops the
// scan and is returned by it. ev is valid only during the call.
typedef int (*store_event_fn)(void *ctx, uint64_t seq, const void *ev, size_t n);
int store_event_scan(store *s, const char *job, uint64_t from, store_event_fn fn, void *ctx, eng_err *e);

// ---- checkpoints ----------------------------------------------------------------
// begin, put shards, commit. Shards are written without the WAL and made
// durable by flushing the family; only then is the manifest (names, sizes,
// crc32c of every shard) written, in one synced WriteBatch with the job's
// "last checkpoint" step. A checkpoint without a manifest is invisible and
// is collected at the next open. Re-saving a step replaces the old
// checkpoint only when the new one commits.
typedef struct store_ckpt store_ckpt;
int store_ckpt_begin(store *s, const char *job, int64_t step, store_ckpt **out, eng_err *e);
int store_ckpt_put(store_ckpt *c, const char *name, const void *data, size_t n, eng_err *e);
// Commits and frees c, whatever the outcome.
int store_ckpt_commit(store_ckpt *c, eng_err *e);
// Frees c without committing and deletes its shards (or, when the database
// takes no writes, leaves them to the next open to collect).
void store_ckpt_abort(store_ckpt *c);

// The job's last committed checkpoint (the field the commit writes);
// returns 1 when it has none.
int store_ckpt_latest(store *s, const char *job, int64_t *step, eng_err *e);
// Committed steps, ascending: fills up to cap of them and sets *n to how
// many exist.
int store_ckpt_list(store *s, const char *job, int64_t *steps, int cap, int *n, eng_err *e);
int store_ckpt_size(store *s, const char *job, int64_t step, const char *name, size_t *n, eng_err *e);
// Reads exactly n bytes of a shard and checks its crc32c; damage gives
// STORE_ECORRUPT with a message naming the job, the step and the shard.
int store_ckpt_load(store *s, const char *job, int64_t step, const char *name, void *data, size_t n,
                    eng_err *e);
// Reads every shard of a checkpoint and checks it; *shards (may be NULL)
// gets their count.
int store_ckpt_verify(store *s, const char *job, int64_t step, int *shards, eng_err *e);
// Deletes one checkpoint and returns its space (compaction frees its blob files).
int store_ckpt_delete(store *s, const char *job, int64_t step, eng_err *e);
// Deletes all but the k newest checkpoints (k >= 1); the last committed one
// is always kept.
int store_ckpt_keep(store *s, const char *job, int k, eng_err *e);

// ---- activation spill -------------------------------------------------------------
// Bytes that live for one step: no WAL, no sync. A value is put and got in
// 4 MiB chunks by the caller and the store's I/O threads together. get
// reads exactly the n bytes put (another n finds nothing); drop deletes the
// step's keys and compacts their range, so the blob files they used are
// deleted and disk use stays bounded from step to step. Opening a store
// deletes whatever spill a previous process left.
int store_act_put(store *s, const char *job, int64_t step, int boundary, int micro, const void *data,
                  size_t n, eng_err *e);
int store_act_get(store *s, const char *job, int64_t step, int boundary, int micro, void *data,
                  size_t n, eng_err *e);
int store_act_drop(store *s, const char *job, int64_t step, eng_err *e);
// Flushes the act family and waits: every spilled value is then in a synced
// blob file (what a measurement of the spill tier's write rate needs).
int store_act_flush(store *s, eng_err *e);
// The spill tier's rates as the executor sees them (for the planner's
// profile): `bytes` put and flushed, then got back, under a job of its own
// that is dropped after; bytes per second each way.
int store_act_probe(store *s, size_t bytes, double *read_bps, double *write_bps, eng_err *e);

// ---- usage ----------------------------------------------------------------------
typedef struct store_usage {
  uint64_t disk[4];     // live SST + blob bytes of jobs, events, ckpt, act
  uint64_t memtable[4]; // memtable bytes (active, unflushed and pinned) of the same
} store_usage;
enum { STORE_CF_JOBS, STORE_CF_EVENTS, STORE_CF_CKPT, STORE_CF_ACT };
int store_usage_get(store *s, store_usage *u, eng_err *e);

// ---- the engine's interface -------------------------------------------------------
// An eng_store for one job: eng_save/eng_load stream checkpoints shard by
// shard through store_ckpt_*, keeping the `keep` newest after each commit and
// once at open (0 keeps all); act_* spill through store_act_*. st->close frees the
// adapter, never the store, which must outlive it.
int store_engine_open(eng_store *st, store *s, const char *job, int keep, eng_err *e);

// ---- Hugging Face export and import -----------------------------------------------
// Writes the weights of a checkpoint (step < 0: the latest) as
// a Hugging Face directory for config c: config.json plus safetensors, in
// BF16 when bf16 != 0, split into files of at most max_shard_bytes (0: one
// file). src_dir, when not NULL, is the model directory the job started
// from: its token ids and tokenizer files go with the export (eng_hf_save),
// read under src_fs (common/fs_open.h; NULL: anywhere).
// Holds the fp32 weights (not the optimizer state) in host memory.
int store_ckpt_export_hf(store *s, const char *job, int64_t step, const eng_config *c, const char *dir,
                         int bf16, size_t max_shard_bytes, const eng_fs *src_fs, const char *src_dir, eng_err *e);
// Opens a run from a Hugging Face directory and saves it as the job's
// checkpoint at step 0 (optimizer state zero), ready for eng_load.
int store_ckpt_import_hf(store *s, const char *job, const char *hf_dir, eng_err *e);

#endif
