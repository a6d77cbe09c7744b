// Register-blocked product of small tiles for the attention kernels, written
// as plain loops that gcc -O3 keeps in registers (8 rows × 32 columns of
// accumulators) and vectorises along the 32 columns.
#ifndef ENG_KERNELS_CPU_TILE_H
#define ENG_KERNELS_CPU_TILE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

// Query and key tile of the attention kernels.
#define ENG_K_ATT_TILE 64

enum { ENG_K_TILE_JB = 32, ENG_K_TILE_RB = 8 };

// Columns 0..JB of rows 0..nq (nq <= RB) of C (= or += by acc) the chains
// over k0 <= k < k1 of the product below. A caller may leave out a k range
// whose A or B entries are all zero: fmaf(0, b, c) is c, so the chain keeps
// its bits.
static inline void eng_k_tile_block_k(float *restrict C, size_t ldc, const float *restrict A, size_t ars,
                                      size_t aks, const float *restrict B, size_t ldb, int nq, int k0, int k1,
                                      int acc) {
  enum { JB = ENG_K_TILE_JB, RB = ENG_K_TILE_RB };
  float c[RB][JB];
  if (nq == RB && k0 < k1) {
    // The first k starts the chains from C or 0, so the accumulators load
    // straight from C into 512-bit registers (a separate copy loop goes
    // through the stack with 256-bit stores that 512-bit loads then stall on).
    const float *b0 = B + (size_t)k0 * ldb;
    for (int q = 0; q < RB; q++) {
      float aq = A[(size_t)q * ars + (size_t)k0 * aks];
      for (int j = 0; j < JB; j++) c[q][j] = fmaf(aq, b0[j], acc ? C[(size_t)q * ldc + j] : 0.0f);
    }
    for (int k = k0 + 1; k < k1; k++) {
      const float *b = B + (size_t)k * ldb;
      for (int q = 0; q < RB; q++) {
        float aq = A[(size_t)q * ars + (size_t)k * aks];
        for (int j = 0; j < JB; j++) c[q][j] = fmaf(aq, b[j], c[q][j]);
      }
    }
    for (int q = 0; q < RB; q++)
      for (int j = 0; j < JB; j++) C[(size_t)q * ldc + j] = c[q][j];
    return;
  }
  for (int q = 0; q < nq; q++) {
    float *cq = C + (size_t)q * ldc;
    float r[JB];
    for (int j = 0; j < JB; j++) r[j] = acc ? cq[j] : 0.0f;
    for (int k = k0; k < k1; k++) {
      const float *b = B + (size_t)k * ldb;
      float aq = A[(size_t)q * ars + (size_t)k * aks];
      for (int j = 0; j < JB; j++) r[j] = fmaf(aq, b[j], r[j]);
    }
    for (int j = 0; j < JB; j++) cq[j] = r[j];
  }
}

// Columns jb..jb+JB of rows r..r+nq (nq <= RB) of the product below.
static inline void eng_k_tile_block(float *restrict C, size_t ldc, const float *restrict A, size_t ars, size_t aks,
                                    const float *restrict B, size_t ldb, int nq, int K, int acc) {
  eng_k_tile_block_k(C, ldc, A, ars, aks, B, ldb, nq, 0, K, acc);
}

// Rows 0..nq (nq <= RB), all w columns, chains over k0 <= k < k1: the
// register blocks, then the columns past the last full block (head dims that
// are not a multiple of 32) with the same chains, straight from memory.
static inline void eng_k_tile_rows(float *restrict C, size_t ldc, const float *restrict A, size_t ars, size_t aks,
                                   const float *restrict B, size_t ldb, int nq, int k0, int k1, int w, int acc) {
  enum { JB = ENG_K_TILE_JB };
  int wfull = w - w % JB;
  for (int jb = 0; jb < wfull; jb += JB) eng_k_tile_block_k(C + jb, ldc, A, ars, aks, B + jb, ldb, nq, k0, k1, acc);
  if (wfull == w) return;
  for (int q = 0; q < nq; q++) {
    float *c = C + (size_t)q * ldc;
    if (!acc)
      for (int j = wfull; j < w; j++) c[j] = 0.0f;
    for (int k = k0; k < k1; k++) {
      const float *b = B + (size_t)k * ldb;
      float aq = A[(size_t)q * ars + (size_t)k * aks];
      for (int j = wfull; j < w; j++) c[j] = fmaf(aq, b[j], c[j]);
    }
  }
}

// C[r][j] (= or += by acc) Σ_k A(r,k) · B[k][j] for r < nr, j < w, k < K, with
// A(r,k) = A[r·ars + k·aks] (so A may be read transposed), B rows ldb apart,
// C rows ldc apart. Every element is one fmaf chain over k in increasing
// order, starting from 0 or from C, whatever block it falls in.
static inline void eng_k_tile_gemm(float *restrict C, size_t ldc, const float *restrict A, size_t ars, size_t aks,
                                   const float *restrict B, size_t ldb, int nr, int K, int w, int acc) {
  enum { RB = ENG_K_TILE_RB };
  for (int r = 0; r < nr; r += RB)
    eng_k_tile_rows(C + (size_t)r * ldc, ldc, A + (size_t)r * ars, ars, aks, B, ldb, nr - r < RB ? nr - r : RB, 0, K,
                    w, acc);
}

// ---- attention tiles: Sᵀ-style products [key][query] of W × W --------------

// First query column of key row j that a diagonal tile computes: the column
// block holding query j; the blocks left of it are all masked.
static inline int eng_k_att_diag_first_col(int j) { return j & ~(ENG_K_TILE_JB - 1); }

// First key each query sees, for the tile of m queries from i0 of a row
// whose position ids are pos (kernels.h; NULL: all start at 0): its
// document's start, st[i] = i0 + i − pos[i0 + i], or with a sliding window
// (window > 0) its window's first key if later, and 0 past the m queries.
// Along a row both never decrease, so st[0] is the tile's earliest, st[m − 1]
// its last: the callers' "document" masks (lo) hold for windows as well.
static inline void eng_k_att_doc_starts(int *st, const int32_t *pos, int i0, int m, int window) {
  for (int i = 0; i < ENG_K_ATT_TILE; i++) {
    st[i] = pos && i < m ? i0 + i - pos[i0 + i] : 0;
    // A sliding window starts a query's keys later still.
    if (window > 0 && i < m && i0 + i - window + 1 > st[i]) st[i] = i0 + i - window + 1;
  }
}

// xT[j][i] = a_j · bT[.][i] for the n key rows of an attention tile (a rows
// ks apart, bT packed [hd][W]). On the diagonal tile the 8-key × 32-query
// blocks whose first key is after their last query are wholly masked and
// left out (nothing reads them).
static inline void eng_k_att_key_products(float *xT, const float *aj, size_t ks, const float *bT, int n, int hd,
                                          int diag) {
  enum { W = ENG_K_ATT_TILE, JB = ENG_K_TILE_JB, RB = ENG_K_TILE_RB };
  for (int r = 0; r < n; r += RB) {
    int nq = n - r < RB ? n - r : RB;
    for (int ib = diag ? eng_k_att_diag_first_col(r) : 0; ib < W; ib += JB)
      eng_k_tile_block_k(xT + (size_t)r * W + ib, W, aj + (size_t)r * ks, ks, 1, bT + ib, W, nq, 0, hd, 0);
  }
}

// Keeps a strided, scalar loop out of its caller's register allocation: inlined
// into the tile loops it reloads its strides from the stack every element.
#if defined(__GNUC__)
#define ENG_K_TILE_NOINLINE __attribute__((noinline, unused))
#else
#define ENG_K_TILE_NOINLINE inline
#endif

// dst[c][j] = src row j, column c (rows ld apart) for j < n, zero for n <= j < w.
static ENG_K_TILE_NOINLINE void eng_k_tile_pack_t(float *restrict dst, const float *restrict src, size_t ld, int n,
                                                  int hd, int w) {
  for (int j = 0; j < n; j++) {
    const float *s = src + (size_t)j * ld;
    for (int c = 0; c < hd; c++) dst[(size_t)c * w + j] = s[c];
  }
  for (int c = 0; c < hd; c++)
    for (int j = n; j < w; j++) dst[(size_t)c * w + j] = 0.0f;
}

#endif
