// bfloat16 <-> fp32: the host gradient store and the streamed working copy
// hold bf16 (DESIGN §2). bf16 is the upper half of an fp32; narrowing rounds
// to nearest, ties to even, and a NaN stays a NaN of the same sign (quiet).
// Every function here gives the same bits on every ISA path and thread count.
#ifndef ENG_COMMON_BF16_H
#define ENG_COMMON_BF16_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/err.h"
#include "common/isa.h"

static inline float eng_bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

// Round to nearest even by adding just under half an ulp plus the lowest kept
// bit. NaN apart: the rounding add could carry its payload into the exponent,
// and truncating could drop every payload bit and leave infinity, so it keeps
// its sign and becomes the quiet NaN. Subnormals round like any other value
// (no flush to zero, unlike the AVX-512 BF16 instructions, which is why the
// SIMD paths use integer arithmetic instead).
static inline uint16_t eng_bf16_from_f32(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// dst[i] = eng_bf16_from_f32(src[i]) for i < n, vectorised and parallel over
// fixed chunks when n is large. isa: ENG_ISA_AUTO, or a path to force (tests);
// returns 0, or ENG_ENOTSUP (and converts nothing) when that path is not
// supported here.
int eng_bf16_from_f32_n(uint16_t *dst, const float *src, size_t n, eng_isa isa);
// dst[i] = eng_bf16_to_f32(src[i]) for i < n (exact); same isa rule.
int eng_bf16_to_f32_n(float *dst, const uint16_t *src, size_t n, eng_isa isa);
// The same on the calling thread alone (the best path here): for a worker
// beside compute, where a parallel team of its own would fight compute's.
void eng_bf16_to_f32_here(float *dst, const uint16_t *src, size_t n);

// Σ x[i]² in double for gradient norms over a bf16 gradient store. Same block
// and lane structure as eng_k_sumsq (blocks of 4096 with 8 interleaved
// partials in a fixed tree, blocks added in order), so for equal values both
// return the same bits, on any thread count.
double eng_bf16_sumsq(const uint16_t *x, size_t n);

#endif
