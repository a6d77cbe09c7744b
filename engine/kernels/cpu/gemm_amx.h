// sgemm on AMX tiles with fp32's accuracy: each float is split into three
// bf16 (x = h + m + l exactly: 8 + 8 + 8 bits of significand), and the six
// products whose size is above fp32's rounding (hh, hm, hl, mh, mm, lh) are
// accumulated in fp32 by the tile unit. What is dropped (ml, lm, ll) is at
// most 2·2^-24 of |a·b|: the error of one fp32 rounding. Measured against
// double, its error is that of OpenBLAS's sgemm (test_kernels). An AMX tile
// multiply does 16x the multiply-adds per cycle of two AVX-512 FMA units,
// so six of them still run about 2.5x faster than fp32 on the vector units.
//
// The bits are defined per element: acc starts at 0; for each block of 32
// k in order, for the pairs lh, mh, mm, hm, hh, hl in that order, the tile
// unit adds the block's 32 products to acc (in its own internal order and
// rounding, which Intel does not spell out but is fixed); then C = acc or
// C + acc. Nothing depends on the other rows or columns, the thread count
// or the blocking: a row's result is the same bits in any call that holds
// it. The tile unit treats denormal bf16 inputs as zero, so a part below
// 2^-126 (l of an |x| under about 2^-110) drops out.
#ifndef ENG_KERNELS_CPU_GEMM_AMX_H
#define ENG_KERNELS_CPU_GEMM_AMX_H

#include "kernels/kernels.h" // eng_k_rows_fn

// Whether this cpu has AMX-BF16 and AVX512-BF16 and the kernel let the
// process use the tile registers (asked once; thread-safe).
int eng_k_amx_usable(void);

// C[M,N] = A·B (+ C when add), shapes and leading dimensions as eng_k_sgemm;
// then(ctx, r0, r1) on rows once they are final, as eng_k_sgemm_then.
// Returns 0 when all is done, 1 when the product is done but then (not NULL)
// is left to the caller, -1 (nothing done) when its packing buffers cannot
// be had.
int eng_k_amx_sgemm(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb, int add,
                    float *C, int ldc, eng_k_rows_fn then, void *ctx);

#endif
