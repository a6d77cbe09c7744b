// The LM head fused with the cross-entropy, a chunk of rows at a time, so the
// [n, V] logits never exist. Per chunk: logits = h·wᵀ (sgemm), per row the max,
// Σ exp in double, lse = max + log Σ, loss = lse − logit[target], dlogits =
// grad_scale·(softmax − onehot) written over the logits; then dh = dlogits·w
// and dw += dlogitsᵀ·h (sgemm). eng_k_sgemm makes a row's logits and dh
// independent of the chunk and the micro-batch that carry it.
#include "kernels/kernels.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/kmath.h"

// Rows per chunk: 256 runs the three products within 5% of one unchunked
// GEMM (64 rows: 20% slower, as dw is read and written once per chunk), but
// the scratch grows with it: 256 rows up to V = 32768 (32 MiB of logits),
// 128 up to V = 131072, else 64.
static int rows_per_chunk(int V) {
  if ((size_t)V * 256 <= ((size_t)8 << 20)) return 256;
  return (size_t)V * 128 <= ((size_t)16 << 20) ? 128 : 64;
}

size_t eng_k_head_loss_scratch_floats(int V) {
  // The logits of one chunk of rows.
  return (size_t)rows_per_chunk(V) * (size_t)V;
}

// Cross-entropy of one row of logits x[V] against target t; when grad, x is
// overwritten by grad_scale·(softmax − onehot). A negative target counts
// nothing and, when grad, leaves a zero row.
static double row_loss(float *x, int V, int32_t t, float grad_scale, int grad) {
  if (t < 0) {
    if (grad) memset(x, 0, sizeof(float) * (size_t)V);
    return 0.0;
  }
  float mx = eng_k_max_row(x, (size_t)V), xt = x[t];
  double acc[8] = {0};
  int j = 0;
  for (; j + 8 <= V; j += 8)
    for (int l = 0; l < 8; l++) {
      x[j + l] = eng_k_expf(x[j + l] - mx);
      acc[l] += (double)x[j + l];
    }
  for (int l = 0; j < V; j++, l++) {
    x[j] = eng_k_expf(x[j] - mx);
    acc[l] += (double)x[j];
  }
  double sum = eng_km_sum8_tree(acc);
  if (grad) {
    float inv = eng_km_ce_inv(sum), et = x[t];
    for (j = 0; j < V; j++) x[j] = eng_km_ce_dlogit(x[j], inv, 0, grad_scale);
    x[t] = eng_km_ce_dlogit(et, inv, 1, grad_scale);
  }
  return eng_km_ce_loss(mx, sum, xt);
}

double eng_k_head_loss(float *dh, float *dw, float *logits_out, const float *h, const float *w,
                       const int32_t *targets, int n, int d, int V, float grad_scale, float *scratch) {
  const int rows = rows_per_chunk(V), grad = dh || dw;
  float *lg = scratch;
  double total = 0.0;
  for (int r0 = 0; r0 < n; r0 += rows) {
    int m = n - r0 < rows ? n - r0 : rows;
    const float *hc = h + (size_t)r0 * d;
    eng_k_sgemm(0, 1, m, V, d, hc, d, w, d, 0.0f, lg, V);
    if (logits_out) memcpy(logits_out + (size_t)r0 * V, lg, sizeof(float) * (size_t)m * V);
    double loss[256];
#pragma omp parallel for schedule(static) if ((size_t)m * V >= ENG_K_PAR_MIN)
    for (int i = 0; i < m; i++) loss[i] = row_loss(lg + (size_t)i * V, V, targets[r0 + i], grad_scale, grad);
    for (int i = 0; i < m; i++) total += loss[i];
    if (dh) eng_k_sgemm(0, 0, m, d, V, lg, V, w, d, 0.0f, dh + (size_t)r0 * d, d);
    if (dw) eng_k_sgemm(1, 0, V, d, m, lg, V, hc, d, 1.0f, dw, d);
  }
  return total;
}
