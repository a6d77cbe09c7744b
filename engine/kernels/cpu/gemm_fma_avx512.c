// The avx512 route's register block (kernels/cpu/gemm_fma.h): 12 rows × 32
// columns of chains in 24 zmm accumulators, one broadcast of A and two loads
// of the panel per step of k.
#include "kernels/cpu/gemm_fma.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))

enum { MR = 12, NR = 32 };

// Row q, step k of op(A) is A[q·rs + k·ks]; the two callers fix one stride
// to 1 so that each becomes its own loop.
AVX512 static inline __attribute__((always_inline)) void block(int kb, const float *A, size_t rs, size_t ks,
                                                               const float *restrict bp, float *C, size_t ldc,
                                                               int add) {
  __m512 c0[MR], c1[MR];
#pragma GCC unroll 12
  for (int q = 0; q < MR; q++) c0[q] = c1[q] = _mm512_setzero_ps();
  for (int k = 0; k < kb; k++) {
    const __m512 b0 = _mm512_load_ps(bp + (size_t)k * NR), b1 = _mm512_load_ps(bp + (size_t)k * NR + 16);
    const float *a = A + (size_t)k * ks;
#pragma GCC unroll 12
    for (int q = 0; q < MR; q++) {
      const __m512 aq = _mm512_set1_ps(a[(size_t)q * rs]);
      c0[q] = _mm512_fmadd_ps(aq, b0, c0[q]);
      c1[q] = _mm512_fmadd_ps(aq, b1, c1[q]);
    }
  }
#pragma GCC unroll 12
  for (int q = 0; q < MR; q++) {
    float *c = C + (size_t)q * ldc;
    if (add) {
      c0[q] = _mm512_add_ps(_mm512_loadu_ps(c), c0[q]);
      c1[q] = _mm512_add_ps(_mm512_loadu_ps(c + 16), c1[q]);
    }
    _mm512_storeu_ps(c, c0[q]);
    _mm512_storeu_ps(c + 16, c1[q]);
  }
}

AVX512 static void rows(int kb, const float *A, size_t lda, const float *bp, float *C, size_t ldc, int add) {
  block(kb, A, lda, 1, bp, C, ldc, add);
}

AVX512 static void cols(int kb, const float *A, size_t lda, const float *bp, float *C, size_t ldc, int add) {
  block(kb, A, 1, lda, bp, C, ldc, add);
}

// The 16 × 16 floats of r transposed in registers (unpacks within 128-bit
// lanes, then lane shuffles): r[c] becomes column c.
AVX512 static inline __attribute__((always_inline)) void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; i++) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; i++) {
    __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
    __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
    r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  for (int i = 0; i < 2; i++)
    for (int c = 0; c < 4; c++) {
      t[8 * i + c] = _mm512_shuffle_f32x4(r[8 * i + c], r[8 * i + 4 + c], 0x88);
      t[8 * i + 4 + c] = _mm512_shuffle_f32x4(r[8 * i + c], r[8 * i + 4 + c], 0xdd);
    }
  for (int c = 0; c < 8; c++) {
    r[c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0x88);
    r[8 + c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0xdd);
  }
}

// The driver's tile_t: 16 rows of src in, their columns out.
AVX512 static void tile_t(float *dst, size_t ldd, const float *src, size_t lds) {
  __m512 r[16];
  for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src + (size_t)i * lds);
  transpose16(r);
  for (int i = 0; i < 16; i++) _mm512_storeu_ps(dst + (size_t)i * ldd, r[i]);
}

const eng_k_fma_isa eng_k_fma_avx512 = {"avx512", MR, NR, 16, rows, cols, tile_t};
#endif
