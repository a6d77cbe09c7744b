// Math shared by the cpu kernels: an exp that the compiler vectorises and
// reductions with a fixed lane structure. Plain C on purpose: -O3 -march=X
// turns these loops into SIMD code, and because every lane does the same
// sequence of roundings (fmaf where fused, nothing contracted) the results
// do not depend on the SIMD width, the alignment peeling or the thread count.
#ifndef ENG_KERNELS_CPU_KMATH_H
#define ENG_KERNELS_CPU_KMATH_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

// Below this many elements an OpenMP region costs more than it saves.
#define ENG_K_PAR_MIN 32768

// exp(x) in float, within 2 ulp of the exact value on [-87, 88]; 0 below
// that range, +inf above, NaN in, NaN out. libm's expf is a scalar call that
// the compiler cannot vectorise without -ffast-math, and softmax over long
// rows spends most of its time in exp. Method: x = n·ln2 + r, |r| <= ln2/2,
// exp(r) by its Taylor series to degree 7 (truncation error < 5e-9), 2^n
// written into the exponent bits.
static inline float eng_k_expf(float x) {
  const float lo = -87.0f, hi = 88.0f;
  float xc = x < lo ? lo : x;
  xc = xc > hi ? hi : xc;
  // Adding 1.5·2^23 rounds to the nearest integer and leaves it in the low
  // mantissa bits, so n needs no float-to-int conversion.
  const float shift = 12582912.0f;
  float t = xc * 1.44269504088896341f + shift;
  float nf = t - shift;
  uint32_t tb;
  memcpy(&tb, &t, sizeof tb);
  uint32_t n = tb - 0x4B400000u;   // two's complement of the integer n
  // ln2 split so that nf·ln2_hi is exact (ln2_hi has 16 significant bits).
  float r = fmaf(nf, -0.693145751953125f, xc);
  r = fmaf(nf, -1.428606765330187e-6f, r);
  float p = 1.0f / 5040.0f;
  p = fmaf(p, r, 1.0f / 720.0f);
  p = fmaf(p, r, 1.0f / 120.0f);
  p = fmaf(p, r, 1.0f / 24.0f);
  p = fmaf(p, r, 1.0f / 6.0f);
  p = fmaf(p, r, 0.5f);
  p = fmaf(p, r, 1.0f);
  p = fmaf(p, r, 1.0f);
  uint32_t sb = (n + 127u) << 23;
  float s;
  memcpy(&s, &sb, sizeof s);
  float y = p * s;
  y = x < lo ? 0.0f : y;
  y = x > hi ? INFINITY : y;
  return x != x ? x : y;
}

// Σ x[i]² in double with 8 interleaved partial sums combined in a fixed
// tree; each square is exact in double, so only the additions round.
static inline double eng_k_sumsq_row(const float *x, size_t n) {
  double acc[8] = {0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; l++) acc[l] += (double)x[i + l] * (double)x[i + l];
  for (int l = 0; i < n; i++, l++) acc[l] += (double)x[i] * (double)x[i];
  return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

// Σ a[i]·b[i] in float with 16 interleaved fmaf chains combined in a fixed
// tree (16 lanes: gcc vectorises this shape, not the 8-lane one).
static inline float eng_k_dot_row(const float *a, const float *b, size_t n) {
  float acc[16] = {0};
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; l++) acc[l] = fmaf(a[i + l], b[i + l], acc[l]);
  for (int l = 0; i < n; i++, l++) acc[l] = fmaf(a[i], b[i], acc[l]);
  for (int w = 8; w >= 1; w /= 2)
    for (int l = 0; l < w; l++) acc[l] += acc[l + w];
  return acc[0];
}

// max of x[0..n), n >= 1. Max is exact in any order, so the lane count is
// free: 64 lanes is a loop gcc vectorises (16 it unrolls and leaves scalar).
static inline float eng_k_max_row(const float *x, size_t n) {
  float acc[64];
  for (int l = 0; l < 64; l++) acc[l] = -INFINITY;
  size_t i = 0;
  for (; i + 64 <= n; i += 64)
    for (int l = 0; l < 64; l++) acc[l] = x[i + l] > acc[l] ? x[i + l] : acc[l];
  for (int l = 0; i < n; i++, l++) acc[l] = x[i] > acc[l] ? x[i] : acc[l];
  float m = acc[0];
  for (int l = 1; l < 64; l++) m = acc[l] > m ? acc[l] : m;
  return m;
}

#endif
