// The register block of the blas route's own chains (kernels/cpu/gemm_fma.h)
// in plain C: 8 rows × 32 columns of fmaf chains that the compiler keeps in
// registers and vectorises along the columns for whatever -march the build
// has (with FMA hardware, fused multiply-adds; fmaf rounds once either way,
// so the bits are those of the avx512 and avx2 blocks).
#include "kernels/cpu/gemm_fma.h"

#include <math.h>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC target("prefer-vector-width=512")
#endif

enum { MR = 8, NR = 32 };

static inline __attribute__((always_inline)) void block(int kb, const float *A, size_t rs, size_t ks,
                                                        const float *restrict bp, float *C, size_t ldc, int add) {
  float c[MR][NR];
  for (int q = 0; q < MR; q++)
    for (int j = 0; j < NR; j++) c[q][j] = 0.0f;
  for (int k = 0; k < kb; k++) {
    const float *b = bp + (size_t)k * NR, *a = A + (size_t)k * ks;
    for (int q = 0; q < MR; q++) {
      float aq = a[(size_t)q * rs];
      for (int j = 0; j < NR; j++) c[q][j] = fmaf(aq, b[j], c[q][j]);
    }
  }
  for (int q = 0; q < MR; q++) {
    float *cq = C + (size_t)q * ldc;
    if (add)
      for (int j = 0; j < NR; j++) cq[j] += c[q][j];
    else
      for (int j = 0; j < NR; j++) cq[j] = c[q][j];
  }
}

static void rows(int kb, const float *A, size_t lda, const float *bp, float *C, size_t ldc, int add) {
  block(kb, A, lda, 1, bp, C, ldc, add);
}

static void cols(int kb, const float *A, size_t lda, const float *bp, float *C, size_t ldc, int add) {
  block(kb, A, 1, lda, bp, C, ldc, add);
}

const eng_k_fma_isa eng_k_fma_generic = {"generic", MR, NR, 0, rows, cols, NULL};
