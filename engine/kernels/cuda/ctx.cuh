// The context of the cuda kernels (kernels_cuda.h's eng_cuda_ctx): the
// stream everything is queued on, cuBLASLt with its workspace and a cache of
// planned GEMMs, and the scratch of the column sums.
#ifndef ENG_KERNELS_CUDA_CTX_CUH
#define ENG_KERNELS_CUDA_CTX_CUH

#include <cublasLt.h>

#include "kernels/cuda/util.cuh"

// cuBLASLt's advice for Hopper is a 32 MiB workspace.
#define ENG_CUDA_GEMM_WS_BYTES ((size_t)32 << 20)
// Column-sum partials (colsum.cuh): 8 MiB of doubles.
#define ENG_CUDA_RED_BYTES ((size_t)8 << 20)

// What a planned GEMM depends on: shapes, transposes, leading dimensions,
// operand and output types, whether C is read, and each operand's alignment
// (cuBLASLt chooses algorithms by alignment); batched ones also the count
// and the strides (0 and 0 for a single product).
typedef struct eng_cuda_gemm_key {
  int ta, tb, m, n, k, lda, ldb, ldc, c_f32, beta1;
  int align[4];
  int ab_f32, batch;
  long long sa, sb, sc;
} eng_cuda_gemm_key;

typedef struct eng_cuda_gemm_plan {
  eng_cuda_gemm_key key;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t a, b, c;
  cublasLtMatmulAlgo_t algo;
} eng_cuda_gemm_plan;

enum { ENG_CUDA_GEMM_CACHE = 64 };

struct eng_cuda_ctx {
  cudaStream_t stream;
  cublasLtHandle_t lt;
  void *ws;                  // ENG_CUDA_GEMM_WS_BYTES
  double *red;               // ENG_CUDA_RED_BYTES
  eng_cuda_gemm_plan plans[ENG_CUDA_GEMM_CACHE];
  int n_plans, next_evict;
};

// Column-major D[m,n] = op(A)·op(B) + beta·C on cx's stream, cuBLAS's
// conventions (ta/tb: 0 = N, 1 = T; A and B bf16; C and D bf16, or fp32 when
// c_f32; beta 0 or 1; C is D when C is NULL). fp32 accumulation and scaling.
int eng_cuda_gemm(eng_cuda_ctx *cx, int ta, int tb, int m, int n, int k, const void *A, int lda, const void *B,
                  int ldb, float beta, const void *C, void *D, int ldc, int c_f32, eng_err *e);

// The same in fp32 throughout, over `batch` products whose operands lie
// sa, sb, sc floats apart (strides may be smaller than a matrix: the blocks
// of one row-major array side by side; the outputs must not overlap). fp32
// compute without TF32 (CUBLAS_COMPUTE_32F): the POET-X kernels compare with
// the cpu's fp32 products. D is C (beta 0 or 1).
int eng_cuda_sgemm_batched(eng_cuda_ctx *cx, int ta, int tb, int m, int n, int k, const float *A, int lda,
                           long long sa, const float *B, int ldb, long long sb, float beta, float *C, int ldc,
                           long long sc, int batch, eng_err *e);

// Destroys the cached plans.
void eng_cuda_gemm_cache_clear(eng_cuda_ctx *cx);

#endif
