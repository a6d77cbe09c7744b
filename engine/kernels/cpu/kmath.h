// Math shared by the cpu kernels: reductions with a fixed lane structure
// (the per-element formulas, exp included, are kernels/kmath_hd.h's, shared
// with the cuda kernels). Plain C on purpose: -O3 -march=X
// turns these loops into SIMD code, and because every lane does the same
// sequence of roundings (fmaf where fused, nothing contracted) the results
// do not depend on the SIMD width, the alignment peeling or the thread count.
#ifndef ENG_KERNELS_CPU_KMATH_H
#define ENG_KERNELS_CPU_KMATH_H

#include <math.h>
#include <omp.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kmath_hd.h"

// Below this many elements an OpenMP region costs more than it saves.
#define ENG_K_PAR_MIN 32768

// Whether a kernel's row loop takes a team: not when its work is too small,
// nor when the caller is already inside a parallel region (a row epilogue of
// a product, eng_k_linear_*_then), where even an inactive nested region is a
// runtime call per 8-row block.
static inline int eng_k_team(size_t work) { return work >= ENG_K_PAR_MIN && !omp_in_parallel(); }

// The cpu kernels' name for eng_km_expf (kernels/kmath_hd.h): exp in plain
// arithmetic that the compiler vectorises and the device reproduces.
static inline float eng_k_expf(float x) { return eng_km_expf(x); }

// Σ x[i]² in double with 8 interleaved partial sums combined in a fixed
// tree; each square is exact in double, so only the additions round.
static inline double eng_k_sumsq_row(const float *x, size_t n) {
  double acc[8] = {0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; l++) acc[l] += (double)x[i + l] * (double)x[i + l];
  for (int l = 0; i < n; i++, l++) acc[l] += (double)x[i] * (double)x[i];
  return eng_km_sum8_tree(acc);
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
