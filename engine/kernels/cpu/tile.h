// Register-blocked product of small tiles for the attention kernels. The
// vector dimension is always a tile dimension (a multiple of 32), never the
// head dim, so every head size runs at full SIMD width. Written as plain
// loops that gcc -O3 keeps in registers: 4 rows × 32 columns of accumulators.
#ifndef ENG_KERNELS_CPU_TILE_H
#define ENG_KERNELS_CPU_TILE_H

#include <math.h>
#include <stddef.h>
#include <string.h>

// Query and key tile of the attention kernels (rows of a tile, and the SIMD
// dimension of every tile product).
#define ENG_K_ATT_TILE 64

// C[r][j] (= or += by acc) Σ_k A(r,k) · B[k][j] for r < nr, j < w, k < K, with
// A(r,k) = A[r·ars + k·aks] (so A may be read transposed), B rows ldb apart,
// C rows ldc apart. w is a multiple of 32. Each element is one fmaf chain over
// k in increasing order, starting from 0 or from C, whatever the blocking.
static inline void eng_k_tile_gemm(float *restrict C, size_t ldc, const float *restrict A, size_t ars, size_t aks,
                                   const float *restrict B, size_t ldb, int nr, int K, int w, int acc) {
  enum { JB = 32, RB = 4 };
  int r = 0;
  for (; r + RB <= nr; r += RB) {
    const float *a = A + (size_t)r * ars;
    for (int jb = 0; jb < w; jb += JB) {
      float c[RB][JB];
      for (int q = 0; q < RB; q++) {
        if (acc)
          memcpy(c[q], C + (size_t)(r + q) * ldc + jb, sizeof c[q]);
        else
          memset(c[q], 0, sizeof c[q]);
      }
      for (int k = 0; k < K; k++) {
        const float *b = B + (size_t)k * ldb + jb;
        for (int q = 0; q < RB; q++) {
          float aq = a[(size_t)q * ars + (size_t)k * aks];
          for (int j = 0; j < JB; j++) c[q][j] = fmaf(aq, b[j], c[q][j]);
        }
      }
      for (int q = 0; q < RB; q++) memcpy(C + (size_t)(r + q) * ldc + jb, c[q], sizeof c[q]);
    }
  }
  for (; r < nr; r++) {
    const float *a = A + (size_t)r * ars;
    float *cr = C + (size_t)r * ldc;
    for (int jb = 0; jb < w; jb += JB) {
      float c[JB];
      if (acc)
        memcpy(c, cr + jb, sizeof c);
      else
        memset(c, 0, sizeof c);
      for (int k = 0; k < K; k++) {
        const float *b = B + (size_t)k * ldb + jb;
        float ak = a[(size_t)k * aks];
        for (int j = 0; j < JB; j++) c[j] = fmaf(ak, b[j], c[j]);
      }
      memcpy(cr + jb, c, sizeof c);
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
