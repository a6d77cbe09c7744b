// RMSNorm forward and backward on bf16 rows: one warp per row, Σ in double
// (the cpu kernel's precision), the per-element formulas of kmath_hd.h.
#include "kernels/cuda/colsum.cuh"

enum { ROWS_PER_BLOCK = 8 }; // warps of a 256-thread block, one row each

static __global__ void rmsnorm_fwd_k(eng_bf16 *y, float *rstd, const eng_bf16 *x, const eng_bf16 *w, int n, int d,
                                     float eps) {
  int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x & 31;
  if (row >= n) return; // the whole warp leaves together
  const eng_bf16 *xi = x + (size_t)row * d;
  double acc = 0.0;
  for (int j = lane; j < d; j += 32) {
    double v = ld_bf16(xi + j);
    acc += v * v;
  }
  float r = eng_km_rms_rstd(warp_sum_d(acc), d, eps);
  if (lane == 0) rstd[row] = r;
  eng_bf16 *yi = y + (size_t)row * d;
  for (int j = lane; j < d; j += 32) st_bf16(yi + j, eng_km_rms_y(ld_bf16(xi + j), r, ld_bf16(w + j)));
}

static __global__ void rmsnorm_bwd_dx_k(eng_bf16 *dx, const eng_bf16 *dy, const eng_bf16 *x, const eng_bf16 *w,
                                        const float *rstd, int n, int d, int accumulate) {
  int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x & 31;
  if (row >= n) return;
  size_t o = (size_t)row * d;
  float r = rstd[row];
  double dot = 0.0;
  for (int j = lane; j < d; j += 32) dot += eng_km_rms_dot_term(ld_bf16(dy + o + j), ld_bf16(w + j), ld_bf16(x + o + j), r);
  float c = eng_km_rms_c(warp_sum_d(dot), d);
  for (int j = lane; j < d; j += 32) {
    float v = eng_km_rms_dx(ld_bf16(dy + o + j), ld_bf16(w + j), ld_bf16(x + o + j), r, c);
    st_bf16(dx + o + j, accumulate ? ld_bf16(dx + o + j) + v : v);
  }
}

// dw_j's addend of row i.
struct rms_dw_term {
  const eng_bf16 *dy, *x;
  const float *rstd;
  int d;
  __device__ double operator()(int i, int j) const {
    size_t o = (size_t)i * d + j;
    return eng_km_rms_dw_term(ld_bf16(dy + o), ld_bf16(x + o), rstd[i]);
  }
};

int eng_cuda_rmsnorm_fwd(eng_bf16 *y, float *rstd, const eng_bf16 *x, const eng_bf16 *w, int n, int d, float eps,
                         eng_cuda_stream s, eng_err *e) {
  if (n <= 0) return 0;
  rmsnorm_fwd_k<<<(n + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK, 32 * ROWS_PER_BLOCK, 0, s>>>(y, rstd, x, w, n, d, eps);
  ENG_CUDA_LAUNCHED("rmsnorm_fwd_k", e);
  return 0;
}

int eng_cuda_rmsnorm_bwd(eng_cuda_ctx *cx, eng_bf16 *dx, float *dw, const eng_bf16 *dy, const eng_bf16 *x,
                         const eng_bf16 *w, const float *rstd, int n, int d, int accumulate_dx, eng_err *e) {
  if (n <= 0) return 0;
  // dw first: it reads dy, which dx may overwrite when a caller aliases them.
  if (dw) {
    int rc = eng_cuda_colsum(cx, dw, n, d, rms_dw_term{dy, x, rstd, d}, e);
    if (rc) return rc;
  }
  if (dx) {
    rmsnorm_bwd_dx_k<<<(n + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK, 32 * ROWS_PER_BLOCK, 0, cx->stream>>>(
        dx, dy, x, w, rstd, n, d, accumulate_dx);
    ENG_CUDA_LAUNCHED("rmsnorm_bwd_dx_k", e);
  }
  return 0;
}
