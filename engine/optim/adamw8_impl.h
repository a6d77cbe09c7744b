// Internal to the 8-bit AdamW pass: what one block's kernel receives, and the
// per-element arithmetic every path shares. The scalar path is these inlines
// in a loop; the SIMD paths (adamw8_avx2.c, adamw8_avx512.c) do the same
// operations on 8 or 16 lanes and fall back to them for a block's last
// partial group of 16 elements.
#ifndef ENG_OPTIM_ADAMW8_IMPL_H
#define ENG_OPTIM_ADAMW8_IMPL_H

#include <math.h>

#include "common/bf16.h"
#include "optim/adamw.h"
#include "optim/adamw8.h"
#include "optim/q8map.h"

typedef struct aw8_args {
  const eng_adamw8_state *s;
  const eng_q8map *qm, *qv; // signed map for m, unsigned for v
  eng_adamw_coef c;
  float *w;
  const float *gf;          // exactly one of gf / gb is set
  const uint16_t *gb;
  size_t g0;                // the element gf[0] / gb[0] is: 0, or a block's first (its gradient
                            // gathered apart, eng_adamw8_io.g_rows)
  float *wf;                // working copy: at most one of wf / wb is set
  uint16_t *wb;
} aw8_args;

// One block's statistics; the pass adds them in block order (see adamw8.h).
typedef struct aw8_bstat {
  double sumsq;       // Σ over the block's 16 lanes, in lane order, of each lane's fp32 Σ u²
  float amax;         // max |u|
  uint32_t nonfinite;
} aw8_bstat;

// Runs block b of a->s: reads and writes only that block's elements and state.
typedef void (*aw8_block_fn)(const aw8_args *a, size_t b, aw8_bstat *st);

void eng_adamw8_blk_fp32(const aw8_args *a, size_t b, aw8_bstat *st);
void eng_adamw8_blk_scalar(const aw8_args *a, size_t b, aw8_bstat *st);
#if defined(__x86_64__)
void eng_adamw8_blk_avx2(const aw8_args *a, size_t b, aw8_bstat *st);
void eng_adamw8_blk_avx512(const aw8_args *a, size_t b, aw8_bstat *st);
#endif

// Running statistics of a block: lanes of Σ u² and the maxima the SIMD
// paths keep in registers, spilled here for the scalar tail.
typedef struct aw8_acc {
  float sq[16];
  float umax, am, av; // max |u|, max |m'|, max of the new second moment (or its root)
  uint32_t nonfinite;
} aw8_acc;

static inline size_t aw8_block_len(const eng_adamw8_state *s, size_t b) {
  size_t i0 = b * (size_t)s->block;
  return s->numel - i0 < (size_t)s->block ? s->numel - i0 : (size_t)s->block;
}

// max as _mm*_max_ps computes it: x > y ? x : y.
static inline float aw8_max(float x, float y) { return x > y ? x : y; }

// The AdamW step of element i (block offset j): eng_adamw_update's
// arithmetic. *m and *v hold the old moments on entry and the new ones on
// return (the old ones, untouched, when the element is skipped). With
// sqrt_v, *v holds the square root of the second moment instead: what the
// 8-bit state stores (see adamw8.h), squared here and re-rooted by the same
// sqrtf the denominator needs. Updates w[i] and the working copy and adds to
// the block's statistics.
static inline void aw8_elem(const aw8_args *a, size_t i, size_t j, float *m, float *v, int sqrt_v,
                            aw8_acc *acc) {
  const eng_adamw_coef *c = &a->c;
  float g = a->gf ? a->gf[i - a->g0] : eng_bf16_to_f32(a->gb[i - a->g0]);
  float w = a->w[i];
  float v0 = sqrt_v ? *v * *v : *v;
  float gi = g * c->clip;
  float p = w * c->decay;
  float mi = *m + (gi - *m) * c->a1;
  float vi = v0 * c->beta2 + c->a2 * (gi * gi);
  float root = sqrtf(vi);
  float denom = root / c->bc2_sqrt + c->eps;
  float wn = p - c->step_size * (mi / denom);
  if (vi < INFINITY) { // false for +inf and NaN: a non-finite gradient or an overflow
    *m = mi;
    *v = sqrt_v ? root : vi;
  } else {
    wn = w;
    acc->nonfinite++;
  }
  a->w[i] = wn;
  if (a->wf) a->wf[i] = wn;
  if (a->wb) a->wb[i] = eng_bf16_from_f32(wn);
  float u = wn - w;
  acc->sq[j & 15] += u * u;
  acc->umax = aw8_max(fabsf(u), acc->umax);
  acc->am = aw8_max(fabsf(*m), acc->am);
  acc->av = aw8_max(*v, acc->av);
}

static inline void aw8_finish(const aw8_acc *acc, aw8_bstat *st) {
  double s = 0.0;
  for (int l = 0; l < 16; l++) s += (double)acc->sq[l];
  st->sumsq = s;
  st->amax = acc->umax;
  st->nonfinite = acc->nonfinite;
}

#endif
