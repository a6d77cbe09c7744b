// Linear layers y = x·Wᵀ (+ b) (+ res) on cuBLASLt. Row-major [rows, cols]
// arrays are column-major [cols, rows] to cuBLAS, so with W = [out, in]:
//   y  [out × n] = op_T(W [in × out]) · x [in × n]               (TN)
//   dx [in × n]  = W [in × out] · dy [out × n]                    (NN)
//   dW [in × out] += x [in × n] · op_T(dy [out × n])              (NT, fp32 C)
// Bias gradients are column sums of dy (colsum.cuh).
#include "kernels/cuda/colsum.cuh"

static __global__ void bias_add_k(eng_bf16 *y, const eng_bf16 *b, int n, int out) {
  size_t total = (size_t)n * out;
  for (size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x; p < total; p += (size_t)gridDim.x * blockDim.x)
    st_bf16(y + p, ld_bf16(y + p) + ld_bf16(b + p % out));
}

struct bias_term {
  const eng_bf16 *dy;
  int out;
  __device__ double operator()(int i, int j) const { return (double)ld_bf16(dy + (size_t)i * out + j); }
};

int eng_cuda_linear_fwd(eng_cuda_ctx *cx, eng_bf16 *y, const eng_bf16 *x, const eng_bf16 *w, const eng_bf16 *b,
                        const eng_bf16 *res, int n, int in, int out, eng_err *e) {
  if (n <= 0 || out <= 0) return 0;
  int rc = eng_cuda_gemm(cx, 1, 0, out, n, in, w, in, x, in, res ? 1.0f : 0.0f, res, y, out, 0, e);
  if (rc || !b) return rc;
  // The bias is added to the finished product: one more rounding (the cpu
  // kernel rounds the same way).
  bias_add_k<<<grid_for((size_t)n * out, 256), 256, 0, cx->stream>>>(y, b, n, out);
  ENG_CUDA_LAUNCHED("bias_add_k", e);
  return 0;
}

int eng_cuda_linear_bwd(eng_cuda_ctx *cx, eng_bf16 *dx, float *dw, float *db, const eng_bf16 *dy, const eng_bf16 *x,
                        const eng_bf16 *w, int n, int in, int out, int accumulate_dx, eng_err *e) {
  if (n <= 0 || in <= 0 || out <= 0) return 0;
  int rc = 0;
  if (dx) rc = eng_cuda_gemm(cx, 0, 0, in, n, out, w, in, dy, out, accumulate_dx ? 1.0f : 0.0f, NULL, dx, in, 0, e);
  if (!rc && dw) rc = eng_cuda_gemm(cx, 0, 1, in, out, n, x, in, dy, out, 1.0f, NULL, dw, in, 1, e);
  if (!rc && db) rc = eng_cuda_colsum(cx, db, n, out, bias_term{dy, out}, e);
  return rc;
}
