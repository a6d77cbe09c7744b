// The LM head fused with the cross-entropy, a chunk of rows at a time, so the
// [n, V] logits never exist in full (kernels.h's eng_k_head_loss on the GPU).
// Per chunk: fp32 logits = h·wᵀ (cuBLASLt); one block per row folds the
// row into a log-sum-exp pair (kmath_hd.h's eng_km_lse_add per thread,
// eng_km_lse_combine in a fixed tree), writes its loss and its bf16
// dlogits; the chunk's losses are summed in a fixed tree into *loss_sum;
// then dh = dlogits·w and dw += dlogitsᵀ·h (fp32).
#include "kernels/cuda/ctx.cuh"

enum { ROW_THREADS = 512, SUM_THREADS = 256 };

// The scratch's parts start 256-byte aligned, as eng_cuda_head_loss_scratch_bytes
// (layout.c) counts them.
static size_t up256(size_t n) { return (n + 255) & ~(size_t)255; }

static __global__ void __launch_bounds__(ROW_THREADS)
ce_rows_k(eng_bf16 *dl, double *row_loss, const float *logits, const int32_t *targets, int V, float grad_scale,
          int grad) {
  __shared__ float wm[ROW_THREADS / 32];
  __shared__ double ws[ROW_THREADS / 32];
  __shared__ float row_m;
  __shared__ double row_s;
  const int i = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid / 32;
  const float *x = logits + (size_t)i * V;
  eng_bf16 *d = dl + (size_t)i * V;
  const int32_t t = targets[i];
  if (t < 0 || t >= V) { // not counted: no loss, a zero gradient row
    if (tid == 0) row_loss[i] = 0.0;
    if (grad)
      for (int j = tid; j < V; j += ROW_THREADS) d[j] = 0;
    return;
  }
  float m = -INFINITY;
  double s = 0.0;
  for (int j = tid; j < V; j += ROW_THREADS) eng_km_lse_add(&m, &s, x[j]);
  for (int o = 16; o > 0; o >>= 1) { // lane 0 ends with the warp's pair
    float m2 = __shfl_down_sync(0xffffffffu, m, o);
    double s2 = __shfl_down_sync(0xffffffffu, s, o);
    eng_km_lse_combine(&m, &s, m2, s2);
  }
  if (lane == 0) wm[warp] = m, ws[warp] = s;
  __syncthreads();
  if (tid == 0) {
    m = wm[0], s = ws[0];
    for (int w = 1; w < ROW_THREADS / 32; w++) eng_km_lse_combine(&m, &s, wm[w], ws[w]);
    row_m = m, row_s = s;
    row_loss[i] = eng_km_ce_loss(m, s, x[t]);
  }
  __syncthreads();
  if (!grad) return;
  const float mx = row_m, inv = eng_km_ce_inv(row_s);
  for (int j = tid; j < V; j += ROW_THREADS) st_bf16(d + j, eng_km_ce_dlogit(eng_km_expf(x[j] - mx), inv, j == t, grad_scale));
}

// *loss_sum += Σ row_loss[0..m): strided partials, then a fixed tree.
static __global__ void sum_rows_k(double *loss_sum, const double *row_loss, int m) {
  __shared__ double sh[SUM_THREADS];
  double a = 0.0;
  for (int i = threadIdx.x; i < m; i += SUM_THREADS) a += row_loss[i];
  sh[threadIdx.x] = a;
  __syncthreads();
  for (int o = SUM_THREADS / 2; o > 0; o >>= 1) {
    if ((int)threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
    __syncthreads();
  }
  if (threadIdx.x == 0) *loss_sum += sh[0];
}

int eng_cuda_head_loss(eng_cuda_ctx *cx, eng_bf16 *dh, float *dw, float *logits_out, double *loss_sum,
                       const eng_bf16 *h, const eng_bf16 *w, const int32_t *targets, int n, int d, int V,
                       float grad_scale, void *scratch, eng_err *e) {
  const int R = eng_cuda_head_rows_per_chunk(V), grad = dh || dw;
  float *lg = (float *)scratch;
  eng_bf16 *dl = (eng_bf16 *)((char *)scratch + up256((size_t)R * V * sizeof(float)));
  double *rl = (double *)((char *)dl + up256((size_t)R * V * sizeof(eng_bf16)));
  for (int r0 = 0; r0 < n; r0 += R) {
    const int m = n - r0 < R ? n - r0 : R;
    const eng_bf16 *hc = h + (size_t)r0 * d;
    // logits[m,V] = hc·wᵀ, as eng_cuda_linear_fwd lays it out, in fp32.
    int rc = eng_cuda_gemm(cx, 1, 0, V, m, d, w, d, hc, d, 0.0f, NULL, lg, V, 1, e);
    if (rc) return rc;
    if (logits_out)
      ENG_CUDA_TRY(cudaMemcpyAsync(logits_out + (size_t)r0 * V, lg, (size_t)m * V * sizeof(float),
                                   cudaMemcpyDeviceToDevice, cx->stream), e);
    ce_rows_k<<<m, ROW_THREADS, 0, cx->stream>>>(dl, rl, lg, targets + r0, V, grad_scale, grad);
    ENG_CUDA_LAUNCHED("ce_rows_k", e);
    sum_rows_k<<<1, SUM_THREADS, 0, cx->stream>>>(loss_sum, rl, m);
    ENG_CUDA_LAUNCHED("sum_rows_k", e);
    // dh[m,d] = dl·w and dw[V,d] += dlᵀ·hc, as in eng_cuda_linear_bwd.
    if (dh) rc = eng_cuda_gemm(cx, 0, 0, d, m, V, w, d, dl, V, 0.0f, NULL, dh + (size_t)r0 * d, d, 0, e);
    if (!rc && dw) rc = eng_cuda_gemm(cx, 0, 1, d, V, m, hc, d, dl, V, 1.0f, NULL, dw, d, 1, e);
    if (rc) return rc;
  }
  return 0;
}
