// What every implementation of the collectives shares (coll.h).
#include "dist/coll.h"

#include <stdint.h>

#include "common/bf16.h"

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
