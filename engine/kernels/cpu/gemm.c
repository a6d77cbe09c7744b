#include "kernels/cpu/gemm.h"

#include <cblas.h>
#include <stddef.h>
#include <string.h>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC target("prefer-vector-width=512")
#endif
#include "kernels/cpu/tile.h"

// Blocks with at most this many multiply-adds run here: twice the size below
// which OpenBLAS may pick its small-matrix kernels.
#define SMALL_MACS (2.0 * 1000000.0)

// One k block (K <= ENG_K_GEMM_KB), C = chains (add = 0) or C + chains
// (add = 1), 32 columns at a time: op(B)'s columns packed as [k][32], then
// register-blocked chains over 8 rows.
static void small_block(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                        int add, float *C, int ldc) {
  enum { JB = ENG_K_TILE_JB, RB = ENG_K_TILE_RB };
  float bp[ENG_K_GEMM_KB * JB], ct[RB * JB];
  size_t ars = ta ? 1 : (size_t)lda, aks = ta ? (size_t)lda : 1;
  for (int j0 = 0; j0 < N; j0 += JB) {
    int nj = N - j0 < JB ? N - j0 : JB;
    for (int k = 0; k < K; k++)
      for (int j = 0; j < JB; j++)
        bp[k * JB + j] = j >= nj ? 0.0f : tb ? B[(size_t)(j0 + j) * ldb + k] : B[(size_t)k * ldb + j0 + j];
    for (int i0 = 0; i0 < M; i0 += RB) {
      int ni = M - i0 < RB ? M - i0 : RB;
      eng_k_tile_block(ct, JB, A + (size_t)i0 * ars, ars, aks, bp, JB, ni, K, 0);
      for (int q = 0; q < ni; q++) {
        float *c = C + (size_t)(i0 + q) * ldc + j0;
        for (int j = 0; j < nj; j++) c[j] = add ? c[j] + ct[q * JB + j] : ct[q * JB + j];
      }
    }
  }
}

void eng_k_sgemm(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb, float beta,
                 float *C, int ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0 && beta == 0.0f)
    for (int i = 0; i < M; i++) memset(C + (size_t)i * ldc, 0, sizeof(float) * (size_t)N);
  for (int k0 = 0; k0 < K; k0 += ENG_K_GEMM_KB) {
    int kb = K - k0 < ENG_K_GEMM_KB ? K - k0 : ENG_K_GEMM_KB;
    int add = k0 > 0 || beta != 0.0f;
    const float *a = ta ? A + (size_t)k0 * lda : A + k0;
    const float *b = tb ? B + k0 : B + (size_t)k0 * ldb;
    if ((double)M * N * kb <= SMALL_MACS)
      small_block(ta, tb, M, N, kb, a, lda, b, ldb, add, C, ldc);
    else
      cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, kb, 1.0f, a,
                  lda, b, ldb, add ? 1.0f : 0.0f, C, ldc);
  }
}
