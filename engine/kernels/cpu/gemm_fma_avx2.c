// The avx2 route's register block (kernels/cpu/gemm_fma.h): 6 rows × 16
// columns of chains in 12 ymm accumulators, one broadcast of A and two loads
// of the panel per step of k (15 of the 16 registers).
#include "kernels/cpu/gemm_fma.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma")))

enum { MR = 6, NR = 16 };

// Row q, step k of op(A) is A[q·rs + k·ks]; the two callers fix one stride
// to 1 so that each becomes its own loop.
AVX2 static inline __attribute__((always_inline)) void block(int kb, const float *A, size_t rs, size_t ks,
                                                             const float *restrict bp, float *C, size_t ldc,
                                                             int add) {
  __m256 c0[MR], c1[MR];
#pragma GCC unroll 6
  for (int q = 0; q < MR; q++) c0[q] = c1[q] = _mm256_setzero_ps();
  for (int k = 0; k < kb; k++) {
    const __m256 b0 = _mm256_load_ps(bp + (size_t)k * NR), b1 = _mm256_load_ps(bp + (size_t)k * NR + 8);
    const float *a = A + (size_t)k * ks;
#pragma GCC unroll 6
    for (int q = 0; q < MR; q++) {
      const __m256 aq = _mm256_broadcast_ss(a + (size_t)q * rs);
      c0[q] = _mm256_fmadd_ps(aq, b0, c0[q]);
      c1[q] = _mm256_fmadd_ps(aq, b1, c1[q]);
    }
  }
#pragma GCC unroll 6
  for (int q = 0; q < MR; q++) {
    float *c = C + (size_t)q * ldc;
    if (add) {
      c0[q] = _mm256_add_ps(_mm256_loadu_ps(c), c0[q]);
      c1[q] = _mm256_add_ps(_mm256_loadu_ps(c + 8), c1[q]);
    }
    _mm256_storeu_ps(c, c0[q]);
    _mm256_storeu_ps(c + 8, c1[q]);
  }
}

AVX2 static void rows(int kb, const float *A, size_t lda, const float *bp, float *C, size_t ldc, int add) {
  block(kb, A, lda, 1, bp, C, ldc, add);
}

AVX2 static void cols(int kb, const float *A, size_t lda, const float *bp, float *C, size_t ldc, int add) {
  block(kb, A, 1, lda, bp, C, ldc, add);
}

const eng_k_fma_isa eng_k_fma_avx2 = {"avx2", MR, NR, rows, cols};
#endif
