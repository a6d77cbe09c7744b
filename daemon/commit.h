// Group commit (DESIGN §5): the loop never touches the disk for the job
// table. It queues each job record, deletion and event here; once per loop
// iteration (after its I/O callbacks, and before it blocks) the thread is
// woken and writes everything queued meanwhile to RocksDB's write-ahead log
// as one batch (store_ops_write) and syncs it once (store_sync): one synced
// write for all the requests one iteration took up, and for every request
// that arrived while the last one was on the disk. What must not happen
// before a write is durable waits for it here and then runs on the loop:
// answering a client that its submission or cancellation is stored, waking
// the watchers that read the job's events back. Writes are applied in the
// order they were queued; a round that fails (a full disk) is retried, its
// writes first, until it goes through, so nothing queued is dropped and its
// waiters wait. A machine that dies loses at most the writes not
// yet synced, none of them acknowledged; a daemon that dies also those not
// yet handed to the log (a millisecond's worth: the thread takes them as
// they come).
#ifndef TRAIND_COMMIT_H
#define TRAIND_COMMIT_H

#include <stdint.h>
#include <uv.h>

#include "storage/store.h"

typedef struct commit commit;

typedef void (*commit_fn)(void *arg);

int commit_start(commit **out, uv_loop_t *loop, store *st);
// Queue a write (loop thread); rec and ev are malloc'd and taken. The job
// record as store_job_put takes it, the job's removal (store_job_delete),
// an event at the sequence number the loop gave it (store_event_put).
// fresh: the job's first record (store_op.fresh).
void commit_job_put(commit *c, const char *job, void *rec, size_t n, uint32_t state, int64_t order, int fresh);
void commit_job_delete(commit *c, const char *job);
void commit_event_put(commit *c, const char *job, uint64_t seq, void *ev, size_t n);
// fn(arg) runs on the loop once every write queued so far is durable: later,
// or at once when nothing is outstanding. -1 when out of memory.
int commit_when_durable(commit *c, commit_fn fn, void *arg);
// The same, but fn runs on the commit thread the moment the sync returns
// (or here, at once): no trip through the loop, for what is safe on any
// thread (srv_reply_send). Loop thread.
int commit_when_durable_any(commit *c, commit_fn fn, void *arg);
// Writes and syncs what is queued and stops the thread; waiters run first.
// A round that fails while stopping is given up (logged): the process ends.
// Writes queued afterwards are made at once, synced. Loop thread.
void commit_stop(commit *c);
void commit_free(commit *c);

#endif
