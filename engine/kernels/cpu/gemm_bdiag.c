// Block-diagonal products (kernels/cpu/gemm.h: eng_k_sgemm_bdiag and
// eng_k_sgemm_bdiag_grad), POET-X's rotations: the register blocks of the
// fp32 chains (kernels/cpu/gemm_fma.h) under a driver of their own.
//
// Why not eng_k_sgemm per block: a block is a narrow product (b columns, b
// deep), and a call per block walks all T rows of a b-wide strip, a stride
// the prefetchers follow badly: at 1024 columns in blocks of 32 it ran at
// half the rate of this driver, where a thread takes a tile of rows and runs
// every block over it, so that each row crosses memory once. (Folding the
// permutations into the packing and the stores was tried: element by element
// it lost to a separate vector gather beyond a few hundred columns.)
#include <omp.h>
#include <stdalign.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_fma.h"
#include "kernels/cpu/kmath.h"

// The largest register block of any instruction set (gemm_fma.c's).
enum { MR_MAX = 16, NR_MAX = 32 };

// The register blocks of the route: its own fp32 chains on avx512 and avx2,
// and on amx too (a b-deep product gains nothing from the tile unit), the
// plain C ones on blas. Every one gives the same bits.
static const eng_k_fma_isa *bdiag_isa(void) {
#if defined(__x86_64__)
  switch (eng_k_gemm_route_get()) {
  case ENG_K_GEMM_AMX:
    if (eng_k_gemm_route_usable(ENG_K_GEMM_AVX512)) return &eng_k_fma_avx512;
    return eng_k_gemm_route_usable(ENG_K_GEMM_AVX2) ? &eng_k_fma_avx2 : &eng_k_fma_generic;
  case ENG_K_GEMM_AVX512: return &eng_k_fma_avx512;
  case ENG_K_GEMM_AVX2: return &eng_k_fma_avx2;
  default: break;
  }
#endif
  return &eng_k_fma_generic;
}

// 64-byte aligned panels inside a caller's work.
static float *panels_at(float *work) { return (float *)(((uintptr_t)work + 63) & ~(uintptr_t)63); }

size_t eng_k_bdiag_work(int dim, int b) {
  size_t bw = ((size_t)b + NR_MAX - 1) / NR_MAX * NR_MAX; // panels' columns, every isa's nr divides NR_MAX
  return (size_t)(dim / b) * bw * (size_t)b + 16;
}

// Every block's op(B) in panels: bp[k][p][i][nr] = op(B_k)(i, p·nr + j), zero
// past b.
static void panels_pack(float *bp, int nblk, int b, int nr, const float *B, int tb) {
  const int np = (b + nr - 1) / nr;
  for (int k = 0; k < nblk; k++) {
    const float *bk = B + (size_t)k * b * b;
    for (int p = 0; p < np; p++) {
      float *d = bp + ((size_t)k * np + p) * b * nr;
      for (int i = 0; i < b; i++)
        for (int j = 0; j < nr; j++) {
          int c = p * nr + j;
          d[(size_t)i * nr + j] = c >= b ? 0.0f : tb ? bk[(size_t)c * b + i] : bk[(size_t)i * b + c];
        }
    }
  }
}

// Rows t0..t0+nq of A's columns c0..c0+kb into ap[q][ld], zero rows past nq.
static void tile_pack(float *ap, int ld, int mr, int nq, const float *A, int lda, int t0, int c0, int kb) {
  for (int q = 0; q < mr; q++) {
    float *d = ap + (size_t)q * ld;
    if (q < nq) memcpy(d, A + (size_t)(t0 + q) * lda + c0, sizeof(float) * (size_t)kb);
    else memset(d, 0, sizeof(float) * (size_t)kb);
  }
}

void eng_k_sgemm_bdiag(int T, int dim, int b, const float *A, int lda, const float *B, int tb, float *C, int ldc,
                       float *work) {
  if (T <= 0 || dim <= 0 || b <= 0) return;
  const eng_k_fma_isa *isa = bdiag_isa();
  const int mr = isa->mr, nr = isa->nr, nblk = dim / b, np = (b + nr - 1) / nr, ntile = (T + mr - 1) / mr;
  const int nch = (b + ENG_K_GEMM_KB - 1) / ENG_K_GEMM_KB, ld = (b < ENG_K_GEMM_KB ? b : ENG_K_GEMM_KB) + 16;
  float *bp = panels_at(work);
  panels_pack(bp, nblk, b, nr, B, tb);
#pragma omp parallel if (eng_k_team((size_t)T * dim * (size_t)b / 16))
  {
    // ap's rows a line more than a chunk apart, not to share L1's sets.
    alignas(64) float ap[MR_MAX * (ENG_K_GEMM_KB + 16)], ct[MR_MAX * NR_MAX];
#pragma omp for schedule(static)
    for (int tile = 0; tile < ntile; tile++) {
      const int t0 = tile * mr, nq = T - t0 < mr ? T - t0 : mr;
      for (int k = 0; k < nblk; k++) {
        if (nch == 1) tile_pack(ap, ld, mr, nq, A, lda, t0, k * b, b);
        for (int p = 0; p < np; p++) {
          const int j0 = p * nr, nj = b - j0 < nr ? b - j0 : nr;
          const float *pp = bp + ((size_t)k * np + p) * b * nr;
          float *c = C + (size_t)t0 * ldc + k * b + j0;
          if (nch == 1 && nq == mr && nj == nr) {
            isa->rows(b, ap, (size_t)ld, pp, c, (size_t)ldc, 0);
            continue;
          }
          // ct: the panel's chains, a chunk of KB deep at a time added in order.
          for (int h = 0; h < nch; h++) {
            const int k0 = h * ENG_K_GEMM_KB, kb = b - k0 < ENG_K_GEMM_KB ? b - k0 : ENG_K_GEMM_KB;
            if (nch > 1) tile_pack(ap, ld, mr, nq, A, lda, t0, k * b + k0, kb);
            isa->rows(kb, ap, (size_t)ld, pp + (size_t)k0 * nr, ct, (size_t)nr, h > 0);
          }
          eng_k_gemm_block_put(c, (size_t)ldc, ct, (size_t)nr, nq, nj, 0);
        }
      }
    }
  }
}

void eng_k_sgemm_bdiag_grad(int T, int dim, int b, const float *A, int lda, const float *D, int ldd, float *C) {
  if (T <= 0 || dim <= 0 || b <= 0) return;
  const eng_k_fma_isa *isa = bdiag_isa();
  const int mr = isa->mr, nr = isa->nr, nblk = dim / b, np = (b + nr - 1) / nr, ni = (b + mr - 1) / mr;
#pragma omp parallel if (eng_k_team((size_t)T * dim * (size_t)b / 16))
  {
    alignas(64) float dp[ENG_K_GEMM_KB * NR_MAX], ap[ENG_K_GEMM_KB * MR_MAX], ct[MR_MAX * NR_MAX];
#pragma omp for schedule(static)
    for (int task = 0; task < nblk * np; task++) {
      const int k = task / np, j0 = task % np * nr, nj = b - j0 < nr ? b - j0 : nr;
      for (int t0 = 0; t0 < T; t0 += ENG_K_GEMM_KB) { // chains of KB rows of t, added into C in order
        const int kb = T - t0 < ENG_K_GEMM_KB ? T - t0 : ENG_K_GEMM_KB;
        for (int t = 0; t < kb; t++) { // the panel: dp[t][j] = D[t0 + t, k·b + j0 + j], zero past b
          const float *d = D + (size_t)(t0 + t) * ldd + k * b + j0;
          float *o = dp + (size_t)t * nr;
          for (int j = 0; j < nj; j++) o[j] = d[j];
          for (int j = nj; j < nr; j++) o[j] = 0.0f;
        }
        for (int it = 0; it < ni; it++) {
          const int i0 = it * mr, nq = b - i0 < mr ? b - i0 : mr;
          for (int t = 0; t < kb; t++) { // ap[t][q] = A[t0 + t, k·b + i0 + q], zero past b
            const float *a = A + (size_t)(t0 + t) * lda + k * b + i0;
            float *o = ap + (size_t)t * mr;
            for (int q = 0; q < nq; q++) o[q] = a[q];
            for (int q = nq; q < mr; q++) o[q] = 0.0f;
          }
          float *c = C + (size_t)k * b * b + (size_t)i0 * b + j0;
          if (nq == mr && nj == nr) {
            isa->cols(kb, ap, (size_t)mr, dp, c, (size_t)b, 1);
          } else {
            isa->cols(kb, ap, (size_t)mr, dp, ct, (size_t)nr, 0);
            eng_k_gemm_block_put(c, (size_t)b, ct, (size_t)nr, nq, nj, 1);
          }
        }
      }
    }
  }
}
