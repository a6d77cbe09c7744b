// SwiGLU gate of the Llama/Qwen MLP: h = silu(gate) · up, silu(g) = g/(1+e^−g)
// (torch's formula). The backward follows torch's silu_backward:
// dgate = (dh·up) · s · (1 + g·(1 − s)), s = 1/(1+e^−g).
// gate and up come from one product with the stacked [gate; up] weights, so a
// row of gu holds the ff gate values and then the ff up values.
#include "kernels/kernels.h"

#include <omp.h>

#include "kernels/cpu/kmath.h"

static void fwd_rows(float *h, const float *gu, int i0, int i1, int ff) {
  for (int i = i0; i < i1; i++) {
    const float *g = gu + (size_t)i * 2 * ff, *u = g + ff;
    float *hi = h + (size_t)i * ff;
    for (int j = 0; j < ff; j++) hi[j] = eng_km_swiglu(g[j], u[j]);
  }
}

static void bwd_rows(float *dgu, const float *dh, const float *gu, int i0, int i1, int ff) {
  for (int i = i0; i < i1; i++) {
    const float *g = gu + (size_t)i * 2 * ff, *u = g + ff, *dhi = dh + (size_t)i * ff;
    float *dg = dgu + (size_t)i * 2 * ff, *du = dg + ff;
    for (int j = 0; j < ff; j++) eng_km_swiglu_bwd(dhi[j], g[j], u[j], &dg[j], &du[j]);
  }
}

void eng_k_swiglu_fwd(float *h, const float *gu, int n, int ff) {
  if (!eng_k_team((size_t)n * (size_t)ff)) {
    fwd_rows(h, gu, 0, n, ff);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int i = 0; i < n; i++) fwd_rows(h, gu, i, i + 1, ff);
}

void eng_k_swiglu_bwd(float *dgu, const float *dh, const float *gu, int n, int ff) {
  if (!eng_k_team((size_t)n * (size_t)ff)) {
    bwd_rows(dgu, dh, gu, 0, n, ff);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int i = 0; i < n; i++) bwd_rows(dgu, dh, gu, i, i + 1, ff);
}
