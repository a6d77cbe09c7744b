// Group commit (DESIGN §5): the loop writes job records and events without
// waiting for the disk (the store's group_commit), and this module's thread
// syncs the write-ahead log while writes are outstanding, one sync for all
// the writes made meanwhile. What must not happen before a write is durable
// (answering a client that its submission or cancellation is stored) waits
// for it here and then runs on the loop. A daemon killed keeps every write
// (they reach the OS as they are made); a machine that dies loses at most
// the writes of the last sync's window, none of them acknowledged.
#ifndef TRAIND_COMMIT_H
#define TRAIND_COMMIT_H

#include <uv.h>

#include "storage/store.h"

typedef struct commit commit;

// rc 0, or the sync's error code and message.
typedef void (*commit_fn)(void *arg, int rc, const char *err);

int commit_start(commit **out, uv_loop_t *loop, store *st);
// A write was made (loop thread): it is synced soon, waited for or not.
void commit_wrote(commit *c);
// fn(arg) runs on the loop once every write made so far is durable: later,
// or at once when nothing is outstanding. -1 when out of memory.
int commit_when_durable(commit *c, commit_fn fn, void *arg);
// Syncs what is outstanding and stops the thread; waiters run first. Writes
// made afterwards are synced by commit_wrote itself. Loop thread.
void commit_stop(commit *c);
void commit_free(commit *c);

#endif
