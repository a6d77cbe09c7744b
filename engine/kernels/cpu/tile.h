// Register-blocked product of small tiles for the attention kernels, written
// as plain loops that gcc -O3 keeps in registers (8 rows × 32 columns of
// accumulators) and vectorises along the 32 columns.
#ifndef ENG_KERNELS_CPU_TILE_H
#define ENG_KERNELS_CPU_TILE_H

#include <math.h>
#include <stddef.h>
#include <string.h>

// Query and key tile of the attention kernels.
#define ENG_K_ATT_TILE 64

enum { ENG_K_TILE_JB = 32, ENG_K_TILE_RB = 8 };

// Columns jb..jb+JB of rows r..r+nq (nq <= RB) of the product below.
static inline void eng_k_tile_block(float *restrict C, size_t ldc, const float *restrict A, size_t ars, size_t aks,
                                    const float *restrict B, size_t ldb, int nq, int K, int acc) {
  enum { JB = ENG_K_TILE_JB, RB = ENG_K_TILE_RB };
  float c[RB][JB];
  for (int q = 0; q < nq; q++) {
    if (acc)
      memcpy(c[q], C + (size_t)q * ldc, sizeof c[q]);
    else
      memset(c[q], 0, sizeof c[q]);
  }
  if (nq == RB) {
    for (int k = 0; k < K; k++) {
      const float *b = B + (size_t)k * ldb;
      for (int q = 0; q < RB; q++) {
        float aq = A[(size_t)q * ars + (size_t)k * aks];
        for (int j = 0; j < JB; j++) c[q][j] = fmaf(aq, b[j], c[q][j]);
      }
    }
  } else {
    for (int q = 0; q < nq; q++)
      for (int k = 0; k < K; k++) {
        const float *b = B + (size_t)k * ldb;
        float aq = A[(size_t)q * ars + (size_t)k * aks];
        for (int j = 0; j < JB; j++) c[q][j] = fmaf(aq, b[j], c[q][j]);
      }
  }
  for (int q = 0; q < nq; q++) memcpy(C + (size_t)q * ldc, c[q], sizeof c[q]);
}

// C[r][j] (= or += by acc) Σ_k A(r,k) · B[k][j] for r < nr, j < w, k < K, with
// A(r,k) = A[r·ars + k·aks] (so A may be read transposed), B rows ldb apart,
// C rows ldc apart. Every element is one fmaf chain over k in increasing
// order, starting from 0 or from C, whatever block it falls in.
static inline void eng_k_tile_gemm(float *restrict C, size_t ldc, const float *restrict A, size_t ars, size_t aks,
                                   const float *restrict B, size_t ldb, int nr, int K, int w, int acc) {
  enum { JB = ENG_K_TILE_JB, RB = ENG_K_TILE_RB };
  int wfull = w - w % JB;
  for (int r = 0; r < nr; r += RB) {
    int nq = nr - r < RB ? nr - r : RB;
    const float *a = A + (size_t)r * ars;
    float *cr = C + (size_t)r * ldc;
    for (int jb = 0; jb < wfull; jb += JB) eng_k_tile_block(cr + jb, ldc, a, ars, aks, B + jb, ldb, nq, K, acc);
    // Columns past the last full block (head dims that are not a multiple
    // of 32): the same chains, straight from memory.
    for (int q = 0; q < nq; q++) {
      float *c = cr + (size_t)q * ldc;
      if (!acc)
        for (int j = wfull; j < w; j++) c[j] = 0.0f;
      for (int k = 0; k < K; k++) {
        const float *b = B + (size_t)k * ldb;
        float aq = a[(size_t)q * ars + (size_t)k * aks];
        for (int j = wfull; j < w; j++) c[j] = fmaf(aq, b[j], c[j]);
      }
    }
  }
}

// dst[c][j] = src row j, column c (rows ld apart) for j < n, zero for n <= j < w.
static inline void eng_k_tile_pack_t(float *restrict dst, const float *restrict src, size_t ld, int n, int hd, int w) {
  for (int c = 0; c < hd; c++) {
    float *d = dst + (size_t)c * w;
    for (int j = 0; j < n; j++) d[j] = src[(size_t)j * ld + c];
    for (int j = n; j < w; j++) d[j] = 0.0f;
  }
}

#endif
