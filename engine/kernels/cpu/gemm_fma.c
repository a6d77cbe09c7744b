// The avx512 and avx2 routes' driver (kernels/cpu/gemm_fma.h): packing of
// op(B), the loops over k blocks, column chunks and row blocks, the threads,
// and the blocks at the edges. The register blocks are in gemm_fma_avx*.c.
#include "kernels/cpu/gemm_fma.h"

#include <omp.h>
#include <stdalign.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/gemm.h" // ENG_K_GEMM_KB, eng_k_gemm_l2_budget, eng_k_gemm_block_put

// The largest register block of any instruction set here.
enum { MR_MAX = 16, NR_MAX = 32 };

// Below this many multiply-adds in a chunk the product runs on one thread:
// a fork and a barrier cost more than the second core gives (measured on
// shared cores, where each barrier may wait a time slice).
#define TEAM_MACS (4.0 * 1024.0 * 1024.0)

// Panel of op(B)'s columns j0..j0+nr of a k block: bp[k][j] = op(B)(k, j0 + j),
// zero past N. A transposed op(B) (the forward's weights; the head's whole
// weight per chunk of rows, where an element-by-element transpose cost a
// quarter of the product) goes through the instruction set's register
// transpose, tw columns × tw k at a time; the k past the last tw and a
// partial group of columns element by element.
static void panel_pack(const eng_k_fma_isa *isa, float *bp, int tb, const float *B, int ldb, int kb, int N, int j0) {
  const int nr = isa->nr, nj = N - j0 < nr ? N - j0 : nr, tw = isa->tile_t ? isa->tw : nr;
  if (tb) {
    const float *b = B + (size_t)j0 * ldb;
    for (int g = 0; g < nr; g += tw) {
      int k0 = 0;
      if (isa->tile_t && nj >= g + tw)
        for (; k0 + tw <= kb; k0 += tw)
          isa->tile_t(bp + (size_t)k0 * nr + g, (size_t)nr, b + (size_t)g * ldb + k0, (size_t)ldb);
      for (int k = k0; k < kb; k++)
        for (int j = g; j < g + tw; j++) bp[(size_t)k * nr + j] = j < nj ? b[(size_t)j * ldb + k] : 0.0f;
    }
  } else {
    for (int k = 0; k < kb; k++) { // a loop for the same reason as row_block's
      const float *src = B + (size_t)k * ldb + j0;
      float *d = bp + (size_t)k * nr;
      for (int j = 0; j < nj; j++) d[j] = src[j];
      for (int j = nj; j < nr; j++) d[j] = 0.0f;
    }
  }
}

// What the threads share for one chunk.
typedef struct chunk {
  const eng_k_fma_isa *isa;
  int ta, M, kb, np, ncols, add;
  const float *A, *bp; // A at the chunk's first k; bp: np panels of kb × nr
  int lda, ldc;
  float *C; // at the chunk's first column
} chunk;

// Whether mr rows of a row-major A, lda floats apart, fall into fewer than 4
// of the 64 sets of a 48 KiB L1 (lda a multiple of 512 floats): read in
// place, each step of k would evict the lines the next steps need.
static int rows_collide(int lda) { return lda % 512 == 0; }

// Floats between the rows of a block copied into ap: a line more than kb, so
// that they do not share L1 sets either.
static int ap_ld(int kb) { return kb + 16; }

// Rows r0.. of C against panels jp0..jp1. op(A)'s rows are read in place
// where they can be; else copied into ap (MR_MAX × ap_ld(KB) floats), zero
// past M: a transposed op(A) as [k][mr] (a run of mr floats per k), the rows
// of a row-major A as [q][ap_ld] (a copy, not a transpose, which would cost a
// tenth of a narrow product's time) when they collide or are a block at the
// bottom edge. ct holds a block at an edge before it reaches C.
static void row_block(const chunk *c, int r0, int jp0, int jp1, float *ap, float *ct) {
  const int mr = c->isa->mr, nr = c->isa->nr, kb = c->kb;
  const int nq = c->M - r0 < mr ? c->M - r0 : mr;
  void (*blk)(int, const float *, size_t, const float *, float *, size_t, int);
  const float *a;
  size_t as;
  if (c->ta) {
    const float *src = c->A + r0;
    // A loop, not memcpy: a call per 48 bytes cost a fifth of a narrow
    // dW product's time (perf, bench5m).
    for (int k = 0; k < kb; k++) {
      const float *s = src + (size_t)k * c->lda;
      float *d = ap + (size_t)k * mr;
      // The runs are a row of A apart, a stride the hardware prefetchers
      // do not follow: ask for the run 16 k ahead.
      if (k + 16 < kb) __builtin_prefetch(s + (size_t)16 * c->lda);
      for (int q = 0; q < nq; q++) d[q] = s[q];
      for (int q = nq; q < mr; q++) d[q] = 0.0f;
    }
    blk = c->isa->cols, a = ap, as = (size_t)mr;
  } else {
    blk = c->isa->rows, a = c->A + (size_t)r0 * c->lda, as = (size_t)c->lda;
    if (nq < mr || rows_collide(c->lda)) {
      const size_t ld = (size_t)ap_ld(kb);
      for (int q = 0; q < mr; q++)
        if (q < nq)
          memcpy(ap + (size_t)q * ld, a + (size_t)q * as, sizeof(float) * (size_t)kb);
        else
          memset(ap + (size_t)q * ld, 0, sizeof(float) * (size_t)kb);
      a = ap, as = ld;
    }
  }
  for (int jp = jp0; jp < jp1; jp++) {
    int j0 = jp * nr, nj = c->ncols - j0 < nr ? c->ncols - j0 : nr;
    const float *p = c->bp + (size_t)jp * kb * nr;
    float *dst = c->C + (size_t)r0 * c->ldc + j0;
    if (nq == mr && nj == nr) {
      blk(kb, a, as, p, dst, (size_t)c->ldc, c->add);
    } else {
      blk(kb, a, as, p, ct, (size_t)nr, 0);
      eng_k_gemm_block_put(dst, (size_t)c->ldc, ct, (size_t)nr, nq, nj, c->add);
    }
  }
}

int eng_k_fma_sgemm(const eng_k_fma_isa *isa, int ta, int tb, int M, int N, int K, const float *A, int lda,
                    const float *B, int ldb, int add, float *C, int ldc, eng_k_rows_fn then, void *ctx) {
  const int mr = isa->mr, nr = isa->nr, nrb = (M + mr - 1) / mr;
  const int kb0 = K < ENG_K_GEMM_KB ? K : ENG_K_GEMM_KB;
  // Columns per chunk: as many panels as fit in the L2 budget, at least one.
  int nc = (int)(eng_k_gemm_l2_budget() / (sizeof(float) * (size_t)kb0 * (size_t)nr)) * nr;
  if (nc < nr) nc = nr;
  if (nc > N) nc = N;
  const int npmax = (nc + nr - 1) / nr;
  float *bp = aligned_alloc(64, sizeof(float) * (size_t)kb0 * (size_t)npmax * (size_t)nr);
  if (!bp) return -1;
  int then_done = 0;
  for (int k0 = 0; k0 < K; k0 += ENG_K_GEMM_KB) {
    const int kb = K - k0 < ENG_K_GEMM_KB ? K - k0 : ENG_K_GEMM_KB, last = k0 + kb >= K;
    const float *ak = ta ? A + (size_t)k0 * lda : A + k0;
    for (int j0 = 0; j0 < N; j0 += nc) {
      const int ncols = N - j0 < nc ? N - j0 : nc, np = (ncols + nr - 1) / nr;
      const int then_here = then && last && ncols == N;
      const float *bj = tb ? B + (size_t)j0 * ldb + k0 : B + (size_t)k0 * ldb + j0;
      chunk c = {isa, ta, M, kb, np, ncols, k0 > 0 || add, ak, bp, lda, ldc, C + j0};
      const int team = (double)M * ncols * kb >= TEAM_MACS && !omp_in_parallel();
#pragma omp parallel if (team)
      {
        alignas(64) float abuf[MR_MAX * (ENG_K_GEMM_KB + 16)], ct[MR_MAX * NR_MAX];
#pragma omp for schedule(static)
        for (int jp = 0; jp < np; jp++) panel_pack(isa, bp + (size_t)jp * kb * nr, tb, bj, ldb, kb, ncols, jp * nr);
        if (nrb >= 2 * omp_get_num_threads() || then_here) {
#pragma omp for schedule(static)
          for (int rb = 0; rb < nrb; rb++) {
            row_block(&c, rb * mr, 0, np, abuf, ct);
            if (then_here) then(ctx, rb * mr, rb * mr + mr < M ? rb * mr + mr : M);
          }
        } else { // few rows (a dW of a narrow layer): threads split the panels too
#pragma omp for schedule(static) collapse(2)
          for (int rb = 0; rb < nrb; rb++)
            for (int jp = 0; jp < np; jp++) row_block(&c, rb * mr, jp, jp + 1, abuf, ct);
        }
      }
      then_done |= then_here;
    }
  }
  free(bp);
  return then && !then_done ? 1 : 0;
}
