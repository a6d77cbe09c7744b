// bf16 conversions: the scalar narrowing rounds to nearest even (checked
// against an independent formulation on every bf16 boundary case), keeps NaN
// a NaN of its sign, rounds subnormals instead of flushing them; the array
// forms give the scalar's bits on every SIMD path at odd lengths; the bf16
// Σx² equals eng_k_sumsq on the widened values, on 1 and 2 threads.
#include "common/bf16.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "kernels/kernels.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t rand32(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (uint32_t)(rng >> 32);
}

static float f32_of(uint32_t b) {
  float f;
  memcpy(&f, &b, sizeof f);
  return f;
}

// Round to nearest even by comparing the dropped half with 0x8000.
static uint16_t ref_narrow(uint32_t u) {
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  uint32_t hi = u >> 16, lo = u & 0xffffu;
  if (lo > 0x8000u || (lo == 0x8000u && (hi & 1u))) hi++;
  return (uint16_t)hi;
}

int main(void) {
  // Every high half with the low halves that decide rounding.
  const uint32_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff};
  for (uint32_t hi = 0; hi < 0x10000; hi++)
    for (size_t k = 0; k < sizeof lows / sizeof *lows; k++) {
      uint32_t u = hi << 16 | lows[k];
      uint16_t got = eng_bf16_from_f32(f32_of(u)), want = ref_narrow(u);
      CHECK(got == want, "bits %08x narrow to %04x, not %04x", u, got, want);
      CHECK(eng_bf16_to_f32((uint16_t)hi) == f32_of(hi << 16) || isnan(f32_of(hi << 16)), "widening %04x", hi);
    }
  CHECK(eng_bf16_from_f32(f32_of(0x7f7fffffu)) == 0x7f80u, "FLT_MAX rounds to infinity");
  CHECK(eng_bf16_from_f32(f32_of(0x00008000u)) == 0x0000u && eng_bf16_from_f32(f32_of(0x00018000u)) == 0x0002u,
        "subnormal ties round to even, not to zero");
  CHECK(eng_bf16_from_f32(f32_of(0xff800001u)) == 0xffc0u, "a NaN with only low payload bits stays a NaN, sign kept");

  // Array forms on every path, lengths around the vector widths.
  enum { N = 1000 };
  float *src = malloc(N * sizeof(float)), *back = malloc(N * sizeof(float));
  uint16_t *ref = malloc(N * sizeof(uint16_t)), *got = malloc(N * sizeof(uint16_t));
  CHECK(src && back && ref && got, "out of memory");
  for (int i = 0; i < N; i++) src[i] = f32_of(i % 7 == 0 ? (rand32() & 0xffff0000u) | 0x8000u : rand32());
  for (int i = 0; i < N; i++) ref[i] = eng_bf16_from_f32(src[i]);
  const size_t lens[] = {0, 1, 7, 8, 15, 16, 17, 31, 33, N};
  for (eng_isa isa = ENG_ISA_SCALAR; isa <= ENG_ISA_AVX512; isa++) {
    if (!eng_isa_supported(isa)) {
      CHECK(eng_bf16_from_f32_n(got, src, N, isa) == ENG_ENOTSUP, "%s: refused when unsupported", eng_isa_name(isa));
      continue;
    }
    for (size_t l = 0; l < sizeof lens / sizeof *lens; l++) {
      size_t n = lens[l];
      memset(got, 0xab, N * sizeof(uint16_t));
      CHECK(eng_bf16_from_f32_n(got, src, n, isa) == 0, "%s: narrowing runs", eng_isa_name(isa));
      CHECK(memcmp(got, ref, n * sizeof(uint16_t)) == 0, "%s: narrowing %zu values differs from the scalar", eng_isa_name(isa), n);
      CHECK(n == N || got[n] == 0xabab, "%s: narrowing %zu values writes past the end", eng_isa_name(isa), n);
      memset(back, 0xab, N * sizeof(float));
      CHECK(eng_bf16_to_f32_n(back, ref, n, isa) == 0, "%s: widening runs", eng_isa_name(isa));
      for (size_t i = 0; i < n; i++)
        CHECK(memcmp(&back[i], &(uint32_t){(uint32_t)ref[i] << 16}, 4) == 0, "%s: widening element %zu", eng_isa_name(isa), i);
    }
  }

  // Σx² over a bf16 gradient equals eng_k_sumsq of the widened values.
  const size_t n = 300001;
  uint16_t *g = malloc(n * sizeof(uint16_t));
  float *gf = malloc(n * sizeof(float));
  CHECK(g && gf, "out of memory");
  for (size_t i = 0; i < n; i++) g[i] = eng_bf16_from_f32((float)((int32_t)rand32()) * 1e-9f);
  CHECK(eng_bf16_to_f32_n(gf, g, n, ENG_ISA_AUTO) == 0, "widening runs");
  for (int threads = 1; threads <= 2; threads++) {
    omp_set_num_threads(threads);
    double a = eng_bf16_sumsq(g, n), b = eng_k_sumsq(gf, n);
    CHECK(memcmp(&a, &b, sizeof a) == 0, "%d thread(s): bf16 sumsq %.17g, fp32 sumsq %.17g", threads, a, b);
  }
  free(src), free(back), free(ref), free(got), free(g), free(gf);
  printf("bf16: ok\n");
  return 0;
}
