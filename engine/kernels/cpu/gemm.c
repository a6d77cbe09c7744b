#include "kernels/cpu/gemm.h"

#include "kernels/cpu/gemm_amx.h"

#include <cblas.h>
#include <math.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC target("prefer-vector-width=512")
#endif
#include "kernels/cpu/kmath.h"
#include "kernels/cpu/tile.h"

// Blocks with at most this many multiply-adds run here: twice the size below
// which OpenBLAS may pick its small-matrix kernels.
#define SMALL_MACS (2.0 * 1000000.0)

// Panel jp of op(B)'s k block: bp[k][j] = op(B)(k, 32·jp + j), zero past N.
static void panel_pack(float *bp, int tb, const float *B, int ldb, int kb, int N, int jp) {
  enum { JB = ENG_K_TILE_JB };
  int j0 = jp * JB, nj = N - j0 < JB ? N - j0 : JB;
  for (int k = 0; k < kb; k++) {
    float *d = bp + (size_t)k * JB;
    if (tb)
      for (int j = 0; j < nj; j++) d[j] = B[(size_t)(j0 + j) * ldb + k];
    else
      memcpy(d, B + (size_t)k * ldb + j0, sizeof(float) * (size_t)nj);
    for (int j = nj; j < JB; j++) d[j] = 0.0f;
  }
}

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
    panel_pack(bp, tb, B, ldb, K, N, j0 / JB);
    for (int i0 = 0; i0 < M; i0 += RB) {
      int ni = M - i0 < RB ? M - i0 : RB;
      eng_k_tile_block(ct, JB, A + (size_t)i0 * ars, ars, aks, bp, JB, ni, K, 0);
      eng_k_gemm_block_put(C + (size_t)i0 * ldc + j0, (size_t)ldc, ct, JB, ni, nj, add);
    }
  }
}

// ---- the packed route: row-major A of many rows against an op(B) whose
// packed k block fits in L2 (the forward and dx products of a layer) ----------
//
// OpenBLAS's chains, from code of our own: op(B)'s k block packed once into
// 32-column panels shared by the threads (kb × N floats, in L2), 8 rows of A
// packed as [k][8] per thread, an 8 × 32 register block of chains from 0,
// then C = chain or C + chain, so it gives the same bits (test_kernels'
// sgemm check covers it) and skips OpenBLAS's zeroing pass over C, which in
// a training step runs at memory speed. Alone, the 5M bench model's shapes
// run from 6% slower to 7% faster than OpenBLAS; in its training step the
// layers' products take 3% less time (2 cores, AVX-512, 2 MiB of L2).
enum { PACKED_MIN_M = 512 };

// The packed panels of a k block must stay in L2 while every row block
// passes them (eng_k_gemm_l2_budget). Wider products (the demo model's
// 2048-wide gate|up against 384 k: 3 MiB of panels) ran 12% slower in a step
// than OpenBLAS.
size_t eng_k_gemm_l2_budget(void) {
  long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE); // glibc reads it once, at start-up
  return (l2 > 0 ? (size_t)l2 : (size_t)1 << 20) / 4 * 3;
}

static void rows_pack(float *ap, const float *A, int lda, int kb, int nq) {
  enum { RB = ENG_K_TILE_RB };
  for (int k = 0; k < kb; k++) {
    for (int q = 0; q < nq; q++) ap[k * RB + q] = A[(size_t)q * lda + k];
    for (int q = nq; q < RB; q++) ap[k * RB + q] = 0.0f;
  }
}

// C rows 0..nq, columns 0..nj (= or += by add) the chains of packed rows ap
// against panel bp.
static inline void packed_tile(float *restrict C, size_t ldc, const float *restrict ap, const float *restrict bp,
                               int kb, int nq, int nj, int add) {
  enum { JB = ENG_K_TILE_JB, RB = ENG_K_TILE_RB };
  float c[RB][JB];
  for (int q = 0; q < RB; q++)
    for (int j = 0; j < JB; j++) c[q][j] = 0.0f;
  for (int k = 0; k < kb; k++) {
    const float *b = bp + (size_t)k * JB, *a = ap + (size_t)k * RB;
    for (int q = 0; q < RB; q++) {
      float aq = a[q];
      for (int j = 0; j < JB; j++) c[q][j] = fmaf(aq, b[j], c[q][j]);
    }
  }
  for (int q = 0; q < nq; q++) {
    float *cq = C + (size_t)q * ldc;
    if (add)
      for (int j = 0; j < nj; j++) cq[j] += c[q][j];
    else
      for (int j = 0; j < nj; j++) cq[j] = c[q][j];
  }
}

// One k block of C = A·op(B) (+ C), A row-major; bp holds kb × N' floats.
// then (when not NULL: the last block) runs on each 8-row block as it is done.
static void packed_block(int tb, int M, int N, int kb, const float *A, int lda, const float *B, int ldb, int add,
                         float *C, int ldc, float *bp, eng_k_rows_fn then, void *ctx) {
  enum { JB = ENG_K_TILE_JB, RB = ENG_K_TILE_RB };
  const int np = (N + JB - 1) / JB, nrb = (M + RB - 1) / RB;
  const size_t panel = (size_t)kb * JB;
#pragma omp parallel
  {
    alignas(64) float ap[ENG_K_GEMM_KB * RB];
#pragma omp for schedule(static)
    for (int jp = 0; jp < np; jp++) panel_pack(bp + (size_t)jp * panel, tb, B, ldb, kb, N, jp);
#pragma omp for schedule(static)
    for (int rb = 0; rb < nrb; rb++) {
      int r0 = rb * RB, nq = M - r0 < RB ? M - r0 : RB;
      rows_pack(ap, A + (size_t)r0 * lda, lda, kb, nq);
      for (int jp = 0; jp < np; jp++) {
        int j0 = jp * JB;
        packed_tile(C + (size_t)r0 * ldc + j0, (size_t)ldc, ap, bp + (size_t)jp * panel, kb, nq,
                    N - j0 < JB ? N - j0 : JB, add);
      }
      if (then) then(ctx, r0, r0 + nq);
    }
  }
}

// Rows per range when then runs after the product.
enum { THEN_ROWS = 32 };

void eng_k_sgemm(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb, float beta,
                 float *C, int ldc) {
  eng_k_sgemm_then(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc, NULL, NULL);
}

// -1 until the first product asks; then the route for the process's life.
static int amx_route = -1;

int eng_k_sgemm_amx(void) {
  int r = __atomic_load_n(&amx_route, __ATOMIC_RELAXED);
  if (r < 0) {
    const char *e = getenv("TRAIND_CPU_GEMM");
    r = !(e && strcmp(e, "fp32") == 0) && eng_k_amx_usable();
    __atomic_store_n(&amx_route, r, __ATOMIC_RELAXED);
  }
  return r;
}

void eng_k_sgemm_amx_set(int on) { __atomic_store_n(&amx_route, on && eng_k_amx_usable(), __ATOMIC_RELAXED); }

// After the product, then on row ranges spread over the threads.
static void then_after(int M, int N, eng_k_rows_fn then, void *ctx) {
  int nr = (M + THEN_ROWS - 1) / THEN_ROWS;
#pragma omp parallel for schedule(static) if ((size_t)M * (size_t)N >= ENG_K_PAR_MIN)
  for (int i = 0; i < nr; i++) then(ctx, i * THEN_ROWS, (i + 1) * THEN_ROWS < M ? (i + 1) * THEN_ROWS : M);
}

void eng_k_sgemm_then(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                      float beta, float *C, int ldc, eng_k_rows_fn then, void *ctx) {
  if (M <= 0 || N <= 0) return;
  if (eng_k_sgemm_amx()) {
    int rc = eng_k_amx_sgemm(ta, tb, M, N, K, A, lda, B, ldb, beta != 0.0f, C, ldc, then, ctx);
    if (rc == 1) then_after(M, N, then, ctx);
    if (rc >= 0) return;
    // Its buffers could not be had: the chains below need a few MiB at
    // most, and differ from it only in the last bits.
  }
  if (K <= 0 && beta == 0.0f)
    for (int i = 0; i < M; i++) memset(C + (size_t)i * ldc, 0, sizeof(float) * (size_t)N);
  const int kb0 = K < ENG_K_GEMM_KB ? K : ENG_K_GEMM_KB;
  int packed = !ta && M >= PACKED_MIN_M && (double)M * N * kb0 > SMALL_MACS &&
               sizeof(float) * (size_t)kb0 * (size_t)N <= eng_k_gemm_l2_budget();
  float *bp = NULL;
  if (packed) {
    const int np = (N + ENG_K_TILE_JB - 1) / ENG_K_TILE_JB;
    // A few MiB at most; without them the same chains come from OpenBLAS.
    bp = aligned_alloc(64, sizeof(float) * (size_t)ENG_K_GEMM_KB * (size_t)np * ENG_K_TILE_JB);
    packed = bp != NULL;
  }
  int then_done = 0;
  for (int k0 = 0; k0 < K; k0 += ENG_K_GEMM_KB) {
    int kb = K - k0 < ENG_K_GEMM_KB ? K - k0 : ENG_K_GEMM_KB, last = k0 + kb >= K;
    int add = k0 > 0 || beta != 0.0f;
    const float *a = ta ? A + (size_t)k0 * lda : A + k0;
    const float *b = tb ? B + k0 : B + (size_t)k0 * ldb;
    if ((double)M * N * kb <= SMALL_MACS) {
      small_block(ta, tb, M, N, kb, a, lda, b, ldb, add, C, ldc);
    } else if (packed) {
      packed_block(tb, M, N, kb, a, lda, b, ldb, add, C, ldc, bp, last ? then : NULL, ctx);
      then_done = last;
    } else {
      cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, kb, 1.0f, a,
                  lda, b, ldb, add ? 1.0f : 0.0f, C, ldc);
    }
  }
  free(bp);
  if (then && !then_done) then_after(M, N, then, ctx);
}
