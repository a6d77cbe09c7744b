// A real spill store for engine tests: a RocksDB store in the test's
// temporary directory (unit/tmpdir.h, tmp_make first) and the engine's view
// of one job in it, for boundaries a policy puts in the store.
#ifndef TESTS_UNIT_SPILL_H
#define TESTS_UNIT_SPILL_H

#include "check.h"
#include "storage/store.h"

typedef struct spill {
  store *st;
  eng_store es;
} spill;

static inline void spill_open(spill *sp, const char *dir_name, const char *job) {
  eng_err e = {0};
  store_options o;
  store_options_defaults(&o);
  CHECK_OK(store_open(&sp->st, tmp_path(dir_name), &o, &e), &e);
  CHECK_OK(store_engine_open(&sp->es, sp->st, job, 0, &e), &e);
}

static inline void spill_close(spill *sp) {
  sp->es.close(sp->es.ctx);
  store_close(sp->st);
}

#endif
