// sgemm for the cpu kernels, with results defined to the bit.
//
// Every call computes, for each block of ENG_K_GEMM_KB consecutive k, each
// element's dot product as one fmaf chain in increasing k from 0, and adds
// the blocks into C in k order (C = block 1 when beta is 0). So a row's
// result depends on nothing but its own inputs: not on how many rows the
// call has, where the row sits, or the thread count.
//
// That is what OpenBLAS's regular sgemm kernels compute for k <= GEMM_Q
// (448 for the SkylakeX ones; tests/unit/test_kernels.c checks it), so
// large blocks go to OpenBLAS, or to gemm.c's packed route, which computes
// the same chains with its own panels. Two of OpenBLAS's behaviours fall outside it: its
// small-matrix kernels (taken when M·N·k <= 1e6) sum in another order, and
// a k between Q and 2Q is split in halves that its single- and multi-threaded
// drivers round differently. Hence the k blocks, and small blocks computed
// here with the same chains.
#ifndef ENG_KERNELS_CPU_GEMM_H
#define ENG_KERNELS_CPU_GEMM_H

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

#endif
