// What every implementation of the collectives shares (coll.h).
#include "dist/coll.h"

#include <stdint.h>
#include <stdlib.h>

#include "common/bf16.h"
#include "common/clock.h"

void eng_coll_slice(size_t count, int world, int r, size_t *off, size_t *n) {
  size_t per = (count + (size_t)world - 1) / (size_t)world, o = per * (size_t)r;
  *off = o < count ? o : count;
  *n = o < count ? (count - o < per ? count - o : per) : 0;
}

size_t eng_coll_dtype_bytes(eng_coll_dtype t) {
  return t == ENG_COLL_F64 ? 8 : t == ENG_COLL_F32 ? 4 : t == ENG_COLL_BF16 ? 2 : 1;
}

// One element type's rank-order sum, for fp32 and fp64 alike.
#define SUM_RANKS(type)                                                                                          \
  do {                                                                                                           \
    const type *s = parts;                                                                                       \
    type *d = dst;                                                                                               \
    for (size_t i = 0; i < n; i++) {                                                                             \
      type acc = s[i];                                                                                           \
      for (int r = 1; r < world; r++) acc += s[(size_t)r * n + i];                                               \
      d[i] = acc;                                                                                                \
    }                                                                                                            \
  } while (0)

void eng_coll_sum_ranks(void *dst, const void *parts, size_t n, int world, eng_coll_dtype t) {
  if (t == ENG_COLL_F32) {
    SUM_RANKS(float);
  } else if (t == ENG_COLL_F64) {
    SUM_RANKS(double);
  } else {
    const uint16_t *s = parts;
    uint16_t *d = dst;
    for (size_t i = 0; i < n; i++) {
      float acc = eng_bf16_to_f32(s[i]);
      for (int r = 1; r < world; r++) acc += eng_bf16_to_f32(s[(size_t)r * n + i]);
      d[i] = eng_bf16_from_f32(acc);
    }
  }
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

// The median seconds of `calls` all-reduces of buf[n] after one another,
// call k on buf + k n (five, after one to warm up).
static int reduce_secs(eng_coll *c, float *buf, size_t n, int calls, double *secs, eng_err *e) {
  enum { RUNS = 5 };
  double t[RUNS + 1];
  int rc = 0;
  for (int i = 0; !rc && i <= RUNS; i++) {
    rc = c->ops->barrier(c, e);
    double t0 = eng_now();
    for (int k = 0; !rc && k < calls; k++) rc = c->ops->all_reduce(c, buf + (size_t)k * n, n, ENG_COLL_F32, e);
    t[i] = eng_now() - t0;
  }
  qsort(t + 1, RUNS, sizeof *t, by_value);
  *secs = t[1 + RUNS / 2];
  return rc;
}

int eng_coll_rate(eng_coll *c, size_t bytes, int calls, double *bps, double *latency, eng_err *e) {
  const size_t n = bytes / sizeof(float) > 16 ? bytes / sizeof(float) : 16;
  if (calls < 1) calls = 1;
  float *buf = malloc(n * (size_t)calls * sizeof *buf);
  if (!buf) return eng_err_set(e, ENG_ENOMEM, "cannot allocate %zu bytes to measure the all-reduce", bytes * calls);
  for (size_t i = 0; i < n * (size_t)calls; i++) buf[i] = 1.0f; // pages of their own (untouched ones all read the zero page)
  double m[2], all;
  int rc = reduce_secs(c, buf, 16, 1, &m[0], e);
  if (!rc) rc = reduce_secs(c, buf, n, calls, &all, e);
  free(buf);
  if (rc) return rc;
  double moved = 2.0 * (c->world - 1) / c->world * (double)(n * sizeof(float)) * calls, busy = all - calls * m[0];
  m[1] = moved / (busy > 0 ? busy : all);
  if ((rc = c->ops->broadcast(c, m, 2, ENG_COLL_F64, 0, e))) return rc; // rank 0's
  *latency = m[0];
  *bps = m[1];
  return 0;
}

#ifndef TRAIND_HAVE_NCCL
int eng_coll_nccl_id(void *id, eng_err *e) {
  (void)id;
  return eng_err_set(e, ENG_ENOTSUP, "this build of traind has no NCCL (it needs CUDA and NCCL at build time)");
}

int eng_coll_nccl_open(eng_coll **out, int rank, int world, int device, const void *id, eng_err *e) {
  (void)rank, (void)world, (void)device, (void)id;
  *out = NULL;
  return eng_coll_nccl_id(NULL, e);
}
#endif
