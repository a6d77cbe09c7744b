// The engine's storage interface (DESIGN §1): where the engine needs durable
// bytes it calls these function pointers; it never knows what is behind them.
// storage/ implements them on RocksDB (store_engine_open); store_dir.c implements them
// on a plain directory for engine-only use and the engine's tests.
//
// Checkpoints: begin(step), any number of put(name, bytes), commit. A
// checkpoint becomes visible (latest/get) only once commit returned 0; an
// interrupted one is never seen. Names are short ASCII ("meta", "w.3").
#ifndef ENG_STORE_H
#define ENG_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

typedef struct eng_store {
  void *ctx;
  int (*ckpt_begin)(void *ctx, int64_t step, eng_err *e);
  int (*ckpt_put)(void *ctx, const char *name, const void *data, size_t n, eng_err *e);
  int (*ckpt_commit)(void *ctx, eng_err *e);
  // Newest committed step into *step; returns 1 (not an error) when none exists.
  int (*ckpt_latest)(void *ctx, int64_t *step, eng_err *e);
  // Size of a shard of a committed checkpoint (to check before reading).
  int (*ckpt_size)(void *ctx, int64_t step, const char *name, size_t *n, eng_err *e);
  // Reads exactly n bytes of a shard; a size mismatch or a failed checksum is an error.
  int (*ckpt_get)(void *ctx, int64_t step, const char *name, void *data, size_t n, eng_err *e);

  // Activation spill (the NVMe tier of a plan): bytes that live for one step.
  // Not durable (no sync); a key is (step, boundary, micro-batch). act_get
  // reads exactly n bytes; act_drop releases the step's space for reuse.
  // NULL in a store that has no spill tier.
  int (*act_put)(void *ctx, int64_t step, int boundary, int micro, const void *data, size_t n, eng_err *e);
  int (*act_get)(void *ctx, int64_t step, int boundary, int micro, void *data, size_t n, eng_err *e);
  int (*act_drop)(void *ctx, int64_t step, eng_err *e);

  void (*close)(void *ctx);
} eng_store;

// A directory store: root/ckpt-<step>/ holds one file per shard and a
// MANIFEST listing names, sizes and checksums, written last; a checkpoint is
// built in root/.tmp-<step>/ and renamed into place (write, fsync, rename,
// fsync the directory), so a crash leaves either the old or the new one.
int eng_store_dir_open(eng_store *s, const char *root, eng_err *e);

#endif
