// The engine's own fp32 sgemm (the avx512 and avx2 routes of
// kernels/cpu/gemm.h, and the blas route's blocks that OpenBLAS does not
// take): exactly the chains eng_k_sgemm defines (per block of ENG_K_GEMM_KB
// k, each element's dot product as one fused multiply-add chain in
// increasing k from 0; C = block 1, then C + each further block). A fused
// multiply-add rounds once whatever the vector width, so every instruction
// set gives the same bits as scalar fmaf: the route changes speed, never
// results.
//
// Arrangement: per k block and per chunk of columns whose packed panels fit
// in L2 (eng_k_gemm_l2_budget), op(B) is packed once into panels of nr
// columns ([k][nr], zero past N) that the threads share; each thread takes
// blocks of mr rows (packed, or read in place where that is cheaper:
// kernels/cpu/gemm_fma.c) and meets every panel with an mr × nr register
// block. A block at an edge goes through a local tile.
#ifndef ENG_KERNELS_CPU_GEMM_FMA_H
#define ENG_KERNELS_CPU_GEMM_FMA_H

#include <stddef.h>

#include "kernels/kernels.h" // eng_k_rows_fn

// One instruction set's register blocks: C[0..mr, 0..nr] = chains (add 0)
// or C + chains (add 1) over kb of op(A)'s rows against a panel bp[kb][nr]
// (64-byte aligned). Row q, step k of op(A) is A[q·lda + k] for rows (A
// row-major) and A[k·lda + q] for cols (A transposed).
// tile_t (NULL: the driver packs a transposed op(B) element by element)
// transposes tw × tw floats in registers: dst[i·ldd + j] = src[j·lds + i];
// the driver packs a transposed op(B)'s panels with it, tw columns × tw k
// at a time.
typedef struct eng_k_fma_isa {
  const char *name;
  int mr, nr, tw;
  void (*rows)(int kb, const float *A, size_t lda, const float *bp, float *C, size_t ldc, int add);
  void (*cols)(int kb, const float *A, size_t lda, const float *bp, float *C, size_t ldc, int add);
  void (*tile_t)(float *dst, size_t ldd, const float *src, size_t lds);
} eng_k_fma_isa;

// avx512 and avx2: present in every x86-64 build (their functions carry
// target attributes); a caller runs one only where eng_isa_supported says the
// cpu can. generic: plain C, any cpu (the blas route's own chains).
extern const eng_k_fma_isa eng_k_fma_avx512, eng_k_fma_avx2, eng_k_fma_generic;

// C[M,N] = op(A)·op(B) (+ C when add), shapes and leading dimensions as
// eng_k_sgemm, K >= 1; then(ctx, r0, r1) on rows once they are final, as
// eng_k_sgemm_then. Returns 0 when all is done, 1 when the product is done
// but then (not NULL) is left to the caller, -1 (nothing done) when its
// panel buffer cannot be had.
int eng_k_fma_sgemm(const eng_k_fma_isa *isa, int ta, int tb, int M, int N, int K, const float *A, int lda,
                    const float *B, int ldb, int add, float *C, int ldc, eng_k_rows_fn then, void *ctx);

#endif
