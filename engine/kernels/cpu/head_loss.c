// The LM head fused with the cross-entropy, ROWS tokens at a time, so the
// [n, V] logits never exist. Per chunk: logits = h·wᵀ (sgemm), per row the max,
// Σ exp in double, lse = max + log Σ, loss = lse − logit[target], dlogits =
// grad_scale·(softmax − onehot) written over the logits; then dh = dlogits·w
// and dw += dlogitsᵀ·h (sgemm).
//
// Split invariance: OpenBLAS gives a row the same bits wherever it sits in
// an M-row product, but not for a different M (its small-matrix kernels sum
// in another order). The two row-wise products therefore always run with
// M = ROWS, a short last chunk padded with zero rows in scratch, so a row's
// logits and dh are the same whichever micro-batch and chunk carry it.
#include "kernels/kernels.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "kernels/cpu/kmath.h"

enum { ROWS = 64 };

size_t eng_k_head_loss_scratch_floats(int V, int d) { return (size_t)ROWS * ((size_t)V + (size_t)d); }

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
  double sum = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
  if (grad) {
    float inv = (float)(1.0 / sum), pt = x[t] * inv;
    for (j = 0; j < V; j++) x[j] = (x[j] * inv) * grad_scale;
    x[t] = (pt - 1.0f) * grad_scale;
  }
  return (double)mx + log(sum) - (double)xt;
}

double eng_k_head_loss(float *dh, float *dw, float *logits_out, const float *h, const float *w,
                       const int32_t *targets, int n, int d, int V, float grad_scale, float *scratch) {
  float *lg = scratch, *pad = scratch + (size_t)ROWS * V;
  const int grad = dh || dw;
  double total = 0.0;
  for (int r0 = 0; r0 < n; r0 += ROWS) {
    int m = n - r0 < ROWS ? n - r0 : ROWS;
    const float *hc = h + (size_t)r0 * d;
    if (m < ROWS) {
      memcpy(pad, hc, sizeof(float) * (size_t)m * d);
      memset(pad + (size_t)m * d, 0, sizeof(float) * (size_t)(ROWS - m) * d);
      hc = pad;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, ROWS, V, d, 1.0f, hc, d, w, d, 0.0f, lg, V);
    if (logits_out) memcpy(logits_out + (size_t)r0 * V, lg, sizeof(float) * (size_t)m * V);
    double loss[ROWS];
#pragma omp parallel for schedule(static) if ((size_t)m * V >= ENG_K_PAR_MIN)
    for (int i = 0; i < m; i++) loss[i] = row_loss(lg + (size_t)i * V, V, targets[r0 + i], grad_scale, grad);
    for (int i = 0; i < m; i++) total += loss[i];
    if (!grad) continue;
    memset(lg + (size_t)m * V, 0, sizeof(float) * (size_t)(ROWS - m) * V);
    if (dh) {
      float *out = m < ROWS ? pad : dh + (size_t)r0 * d;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ROWS, d, V, 1.0f, lg, V, w, d, 0.0f, out, d);
      if (m < ROWS) memcpy(dh + (size_t)r0 * d, pad, sizeof(float) * (size_t)m * d);
    }
    if (dw)
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, V, d, m, 1.0f, lg, V, h + (size_t)r0 * d, d, 1.0f, dw, d);
  }
  return total;
}
