// RMSNorm as transformers computes it: var = mean(x²) taken in fp32,
// xhat = x · (1/sqrt(var + eps)), y = w · xhat. The sum of squares runs in
// double and is rounded once, so var is the fp32 value of the exact mean.
//
// One implementation serves the model's norms over d_model (a row is a
// vector) and Qwen3's q/k norms (a row holds heads vectors of hd, read from
// the fused q|k|v projection, so rows are further apart than they are wide).
#include "kernels/kernels.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>

#include "kernels/cpu/kmath.h"

// Vector v = i·g + j of n rows × g groups: row i, group j, d values from
// x + i·ldx + j·xs (y + i·ldy + j·d: the output's groups are contiguous). Loops run over rows and groups (no division per vector).
static void fwd_row(float *y, size_t ldy, float *rstd, const float *x, size_t ldx, size_t xs, const float *w, int i,
                    int g, int d, float eps) {
  for (int j = 0; j < g; j++) {
    const float *xi = x + (size_t)i * ldx + (size_t)j * xs;
    float *yi = y + (size_t)i * ldy + (size_t)j * d;
    float r = eng_km_rms_rstd(eng_k_sumsq_row(xi, (size_t)d), d, eps);
    rstd[(size_t)i * g + j] = r;
    for (int e = 0; e < d; e++) yi[e] = eng_km_rms_y(xi[e], r, w[e]);
  }
}

static void norm_fwd(float *y, size_t ldy, float *rstd, const float *x, size_t ldx, size_t xs, const float *w, int n,
                     int g, int d, float eps) {
  if (!eng_k_team((size_t)n * g * (size_t)d)) {
    for (int i = 0; i < n; i++) fwd_row(y, ldy, rstd, x, ldx, xs, w, i, g, d, eps);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int i = 0; i < n; i++) fwd_row(y, ldy, rstd, x, ldx, xs, w, i, g, d, eps);
}

// Σ_j dy[j]·w[j]·xhat[j] in double with 8 partial sums in a fixed tree.
static double dot_dxhat_xhat(const float *dy, const float *w, const float *x, float r, int d) {
  double acc[8] = {0};
  int j = 0;
  for (; j + 8 <= d; j += 8)
    for (int l = 0; l < 8; l++) acc[l] += eng_km_rms_dot_term(dy[j + l], w[j + l], x[j + l], r);
  for (int l = 0; j < d; j++, l++) acc[l] += eng_km_rms_dot_term(dy[j], w[j], x[j], r);
  return eng_km_sum8_tree(acc);
}

// dx = r·(dxhat − xhat·mean(dxhat∘xhat)) with dxhat = dy∘w (eng_km_rms_dx),
// plus dres when given (the residual's gradient, added in the same pass).
// dw[j] += Σ_v dy[v][j]·xhat[v][j], summed in double over CHUNKS fixed ranges
// of vectors (each over its vectors in order) that are then added in range
// order. A range is one work item: its dx and its dw partial come from one
// read of dy and x, both threads get work however few columns there are (the
// q/k norms have hd), and nothing depends on the thread count.
enum { CHUNKS = 8 };

// dx and dres are laid out like x (ldx); dy has its own ldy.
static void norm_bwd(float *dx, float *dw, const float *dy, size_t ldy, const float *dres, const float *x,
                     size_t ldx, size_t xs, const float *w, const float *rstd, int n, int g, int d) {
  int nv = n * g;
  double *part = dw ? malloc(sizeof(double) * CHUNKS * (size_t)d) : NULL;
  if (dw && !part) abort(); // a few KiB: out of memory here is not recoverable
#pragma omp parallel for schedule(static) if ((size_t)nv * (size_t)d >= ENG_K_PAR_MIN)
  for (int ch = 0; ch < CHUNKS; ch++) {
    int v0 = (int)((long long)nv * ch / CHUNKS), v1 = (int)((long long)nv * (ch + 1) / CHUNKS);
    double *acc = dw ? part + (size_t)ch * d : NULL;
    if (acc)
      for (int j = 0; j < d; j++) acc[j] = 0.0;
    for (int v = v0, i = v0 / g, h = v0 % g; v < v1; v++) {
      size_t ox = (size_t)i * ldx + (size_t)h * xs;
      const float *xi = x + ox, *dyi = dy + (size_t)i * ldy + (size_t)h * d;
      float r = rstd[v];
      if (dx) {
        float *dxi = dx + ox;
        float c = eng_km_rms_c(dot_dxhat_xhat(dyi, w, xi, r, d), d);
        if (dres) {
          const float *ri = dres + ox;
          for (int j = 0; j < d; j++) dxi[j] = ri[j] + eng_km_rms_dx(dyi[j], w[j], xi[j], r, c);
        } else {
          for (int j = 0; j < d; j++) dxi[j] = eng_km_rms_dx(dyi[j], w[j], xi[j], r, c);
        }
      }
      if (acc)
        for (int j = 0; j < d; j++) acc[j] += eng_km_rms_dw_term(dyi[j], xi[j], r);
      if (++h == g) h = 0, i++;
    }
  }
  if (!dw) return;
  for (int j = 0; j < d; j++) {
    double t = 0.0;
    for (int ch = 0; ch < CHUNKS; ch++) t += part[(size_t)ch * d + j];
    dw[j] += (float)t;
  }
  free(part);
}

void eng_k_rmsnorm_fwd(float *y, float *rstd, const float *x, const float *w, int n, int d, float eps) {
  norm_fwd(y, (size_t)d, rstd, x, (size_t)d, (size_t)d, w, n, 1, d, eps);
}

void eng_k_rmsnorm_bwd(float *dx, float *dw, const float *dy, const float *dres, const float *x, const float *w,
                       const float *rstd, int n, int d) {
  norm_bwd(dx, dw, dy, (size_t)d, dres, x, (size_t)d, (size_t)d, w, rstd, n, 1, d);
}

void eng_k_headnorm_fwd(float *y, int ldy, float *rstd, const float *x, int ldx, const float *w, int n, int heads,
                        int hd, float eps) {
  norm_fwd(y, (size_t)ldy, rstd, x, (size_t)ldx, (size_t)hd, w, n, heads, hd, eps);
}

void eng_k_headnorm_bwd(float *dx, float *dw, const float *dy, int ldy, const float *x, int ldx, const float *w,
                        const float *rstd, int n, int heads, int hd) {
  norm_bwd(dx, dw, dy, (size_t)ldy, NULL, x, (size_t)ldx, (size_t)hd, w, rstd, n, heads, hd);
}

void eng_k_headnorm_hs_fwd(float *y, int ldy, float *rstd, const float *x, int ldx, int hs, const float *w, int n,
                           int heads, int hd, float eps) {
  norm_fwd(y, (size_t)ldy, rstd, x, (size_t)ldx, (size_t)hs, w, n, heads, hd, eps);
}

void eng_k_headnorm_hs_bwd(float *dx, float *dw, const float *dy, int ldy, const float *x, int ldx, int hs,
                           const float *w, const float *rstd, int n, int heads, int hd) {
  norm_bwd(dx, dw, dy, (size_t)ldy, NULL, x, (size_t)ldx, (size_t)hs, w, rstd, n, heads, hd);
}
