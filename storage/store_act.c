// Activation spill: bytes that live for one step, written without the WAL
// and never synced (a crash loses the step anyway). Values go through the
// act family's memtables (sized by store_options) into blob files at flush;
// drop range-deletes the step and compacts the range, so the step's blob
// files are deleted before the next step fills new ones.
//
// A value is stored as chunks of at most CHUNK bytes under
//   J step boundary micro size chunk
// (the size is in the key, so a get with another size finds nothing rather
// than a prefix of the value), and the chunks of one value are put and got
// by the caller and the store's I/O threads together. Why, as measured by
// tests/bench/storage.sh on 2 cores: whole 16-64 MiB values made RocksDB
// allocate a fresh buffer per get (two, with its pinned copy) and per
// memtable entry, each above glibc's mmap threshold, so every page of every
// value was faulted in and zeroed; with one thread doing that and the copies,
// spill read at 0.33-0.56x and wrote at 0.16-0.65x of plain file I/O.
// 4 MiB chunks come from the heap and are reused, and four threads overlap
// the copies with the disk: 0.66-0.69x read, above 1x write. Chunks of 1, 2
// and 16 MiB, and 2 or 8 in flight, measured within the noise of 4 MiB and 4.
#include <inttypes.h>
#include <stdlib.h>

#include "common/clock.h"
#include "store_impl.h"

enum { CHUNK = 4 << 20 };

#define ACT_FMT "activation of job \"%s\" at step %" PRId64 ", boundary %d, micro-batch %d"

static skey key_act(const char *job, int64_t step) {
  skey k = {.n = 0};
  key_job(&k, job);
  key_be64(&k, (uint64_t)step);
  return k;
}

static int check(const char *job, int64_t step, int boundary, int micro, eng_err *e) {
  int rc = store_job_check(job, e);
  if (!rc && (step < 0 || boundary < 0 || micro < 0))
    rc = eng_err_set(e, ENG_EINVAL, ACT_FMT ": negative index", job, step, boundary, micro);
  return rc;
}

// One value being put or got, and one of its chunks.
typedef struct value_op {
  store *s;
  const char *job;
  int64_t step;
  int boundary, micro, put;
  char *data;
  size_t n;
} value_op;

typedef struct chunk_op {
  const value_op *v;
  uint32_t index;
  int rc;
  eng_err e;
} chunk_op;

static void chunk_run(void *arg) {
  chunk_op *c = arg;
  const value_op *v = c->v;
  store *s = v->s;
  size_t off = (size_t)c->index * CHUNK, len = v->n - off < CHUNK ? v->n - off : CHUNK;
  skey k = key_act(v->job, v->step);
  key_be32(&k, (uint32_t)v->boundary);
  key_be32(&k, (uint32_t)v->micro);
  key_be64(&k, v->n);
  key_be32(&k, c->index);
  char *err = NULL;
  if (v->put) {
    rocksdb_put_cf(s->db, s->w_nowal, s->cf[CF_ACT], k.b, k.n, v->data + off, len, &err);
    if (err)
      c->rc = store_rocks_err(s, err, 1, &c->e, ACT_FMT ": spilling %zu bytes", v->job, v->step, v->boundary,
                              v->micro, v->n);
    return;
  }
  rocksdb_pinnableslice_t *p = rocksdb_get_pinned_cf(s->db, s->rd_nocheck, s->cf[CF_ACT], k.b, k.n, &err);
  if (err) {
    c->rc = store_rocks_err(s, err, 0, &c->e, ACT_FMT, v->job, v->step, v->boundary, v->micro);
    return;
  }
  if (!p) {
    c->rc = eng_err_set(&c->e, ENG_ESTATE, ACT_FMT ", %zu bytes, is not in the store (never spilled, spilled "
                        "with another size, dropped, or lost when the store reopened after a failed write)",
                        v->job, v->step, v->boundary, v->micro, v->n);
    return;
  }
  size_t got;
  const char *b = rocksdb_pinnableslice_value(p, &got);
  if (got != len)
    c->rc = eng_err_set(&c->e, STORE_ECORRUPT, ACT_FMT ": chunk %u has %zu bytes, expected %zu", v->job, v->step,
                        v->boundary, v->micro, c->index, got, len);
  else
    memcpy(v->data + off, b, len);
  rocksdb_pinnableslice_destroy(p);
}

// Chunk k goes to I/O thread k mod (threads + 1), the last share to the
// caller, so each thread walks its chunks in order and the file is read
// (or the memtable filled) front to back by all of them together.
static int value_run(value_op *v, eng_err *e) {
  size_t count = v->n ? (v->n + CHUNK - 1) / CHUNK : 1;
  chunk_op one, *ops = count == 1 ? &one : calloc(count, sizeof *ops);
  if (!ops) return eng_err_set(e, ENG_ENOMEM, ACT_FMT ": cannot allocate %zu chunk operations", v->job, v->step,
                               v->boundary, v->micro, count);
  int rc = store_enter(v->s, e);
  if (rc) {
    if (ops != &one) free(ops);
    return rc;
  }
  uint64_t ticket[STORE_IO_THREADS] = {0};
  for (size_t i = 0; i < count; i++) {
    ops[i] = (chunk_op){.v = v, .index = (uint32_t)i};
    size_t t = i % (STORE_IO_THREADS + 1);
    if (t < STORE_IO_THREADS && count > 1) ticket[t] = eng_worker_submit(&v->s->io[t], chunk_run, &ops[i]);
  }
  for (size_t i = 0; i < count; i++)
    if (i % (STORE_IO_THREADS + 1) == STORE_IO_THREADS || count == 1) chunk_run(&ops[i]);
  for (int t = 0; t < STORE_IO_THREADS; t++)
    if (ticket[t]) eng_worker_wait(&v->s->io[t], ticket[t]);
  for (size_t i = 0; i < count && !rc; i++)
    if (ops[i].rc) {
      rc = ops[i].rc;
      if (e) *e = ops[i].e;
    }
  store_leave(v->s);
  if (ops != &one) free(ops);
  return rc;
}

int store_act_put(store *s, const char *job, int64_t step, int boundary, int micro, const void *data,
                  size_t n, eng_err *e) {
  int rc = check(job, step, boundary, micro, e);
  value_op v = {s, job, step, boundary, micro, 1, (char *)data, n};
  return rc ? rc : value_run(&v, e);
}

int store_act_get(store *s, const char *job, int64_t step, int boundary, int micro, void *data, size_t n,
                  eng_err *e) {
  int rc = check(job, step, boundary, micro, e);
  value_op v = {s, job, step, boundary, micro, 0, data, n};
  return rc ? rc : value_run(&v, e);
}

int store_act_drop(store *s, const char *job, int64_t step, eng_err *e) {
  int rc = check(job, step, 0, 0, e);
  if (rc || (rc = store_enter(s, e))) return rc;
  skey lo = key_act(job, step), hi = key_next(lo);
  char *err = NULL;
  rocksdb_delete_range_cf(s->db, s->w_nowal, s->cf[CF_ACT], lo.b, lo.n, hi.b, hi.n, &err);
  if (err) rc = store_rocks_err(s, err, 1, e, "job \"%s\": dropping the activations of step %" PRId64, job, step);
  else store_reclaim(s, CF_ACT, &lo, &hi);
  store_leave(s);
  return rc;
}

int store_act_flush(store *s, eng_err *e) {
  int rc = store_enter(s, e);
  if (rc) return rc;
  char *err = NULL;
  rocksdb_flush_cf(s->db, s->flush, s->cf[CF_ACT], &err);
  if (err) rc = store_rocks_err(s, err, 1, e, "%s: flushing spilled activations", s->dir);
  store_leave(s);
  return rc;
}


int store_act_probe(store *s, size_t bytes, double *read_bps, double *write_bps, eng_err *e) {
  char *buf = malloc(bytes ? bytes : 1);
  if (!buf) return eng_err_set(e, ENG_ENOMEM, "spill probe: cannot allocate %zu bytes", bytes);
  for (size_t i = 0; i < bytes; i++) buf[i] = (char)(i * 131); // not a run of zeros a filesystem could elide
  static const char job[] = "spill-probe";
  double t0 = eng_now();
  int rc = store_act_put(s, job, 0, 0, 0, buf, bytes, e);
  if (!rc) rc = store_act_flush(s, e);
  double t1 = eng_now();
  if (!rc) rc = store_act_get(s, job, 0, 0, 0, buf, bytes, e);
  double t2 = eng_now();
  eng_err ignored;
  store_act_drop(s, job, 0, &ignored);
  free(buf);
  if (rc) return rc;
  *write_bps = (double)bytes / (t1 - t0);
  *read_bps = (double)bytes / (t2 - t1);
  return 0;
}
