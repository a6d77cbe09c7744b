// sgemm for the cpu kernels, with results defined to the bit.
//
// Two routes, one per process (eng_k_sgemm_amx says which):
// - On a cpu with AMX (kernels/cpu/gemm_amx.h), the product of three-way
//   bf16 splits on the tile unit: fp32's accuracy, its bits defined per
//   element there, about 1.5x OpenBLAS's speed on a training step's shapes.
// - Otherwise fp32 fmaf chains: for each block of ENG_K_GEMM_KB consecutive
//   k, each element's dot product as one fmaf chain in increasing k from 0,
//   the blocks added into C in k order (C = block 1 when beta is 0).
// On either route a row's result depends on nothing but its own inputs: not
// on how many rows the call has, where the row sits, or the thread count.
//
// The chains are what OpenBLAS's regular sgemm kernels compute for k <= GEMM_Q
// (448 for the SkylakeX ones; tests/unit/test_kernels.c checks it), so
// large blocks go to OpenBLAS, or to gemm.c's packed route, which computes
// the same chains with its own panels. Two of OpenBLAS's behaviours fall outside it: its
// small-matrix kernels (taken when M·N·k <= 1e6) sum in another order, and
// a k between Q and 2Q is split in halves that its single- and multi-threaded
// drivers round differently. Hence the k blocks, and small blocks computed
// here with the same chains.
#ifndef ENG_KERNELS_CPU_GEMM_H
#define ENG_KERNELS_CPU_GEMM_H

#include <stddef.h>

#include "kernels/kernels.h" // eng_k_rows_fn

#define ENG_K_GEMM_KB 384

// Row-major C[M,N] = A·B + beta·C with beta 0 or 1, A = [M,K] (or [K,M] when
// ta), B = [K,N] (or [N,K] when tb), leading dimensions as in cblas.
void eng_k_sgemm(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb, float beta,
                 float *C, int ldc);

// eng_k_sgemm, then then(ctx, r0, r1) for every row range of C once its rows
// hold their final values: on the packed route right after their last block,
// while they are in cache; otherwise after the product, in ranges spread over
// the threads. Ranges are disjoint and may run at once on different threads,
// so the work on a row must depend on that row alone (then it gives the same
// bits on every route and thread count).
void eng_k_sgemm_then(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                      float beta, float *C, int ldc, eng_k_rows_fn then, void *ctx);

// C rows 0..ni, columns 0..nj = (add = 0) or += (add = 1) a block computed
// apart, rows lds floats apart: how both routes' block products reach C.
static inline void eng_k_gemm_block_put(float *C, size_t ldc, const float *src, size_t lds, int ni, int nj, int add) {
  for (int i = 0; i < ni; i++) {
    float *c = C + (size_t)i * ldc;
    const float *s = src + (size_t)i * lds;
    if (add)
      for (int j = 0; j < nj; j++) c[j] += s[j];
    else
      for (int j = 0; j < nj; j++) c[j] = s[j];
  }
}

// Bytes of packed panels that may stay in L2 while the other operand's
// blocks pass over them, on either route: 3/4 of it (the 2 MiB of these
// machines; 1 MiB where the size is unknown).
size_t eng_k_gemm_l2_budget(void);

// Whether products take the AMX route: where eng_k_amx_usable(), unless the
// environment says TRAIND_CPU_GEMM=fp32 when the first product runs.
int eng_k_sgemm_amx(void);
// Tests: the route from now on (AMX only where usable). A run must not
// change it between steps: the two routes differ in the last bits.
void eng_k_sgemm_amx_set(int on);

#endif
