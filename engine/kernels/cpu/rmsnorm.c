// RMSNorm as transformers computes it: var = mean(x²) taken in fp32,
// xhat = x · (1/sqrt(var + eps)), y = w · xhat. The sum of squares runs in
// double and is rounded once, so var is the fp32 value of the exact mean.
#include "kernels/kernels.h"

#include <math.h>
#include <omp.h>

#include "kernels/cpu/kmath.h"

void eng_k_rmsnorm_fwd(float *y, float *rstd, const float *x, const float *w, int n, int d, float eps) {
#pragma omp parallel for schedule(static) if ((size_t)n * (size_t)d >= ENG_K_PAR_MIN)
  for (int i = 0; i < n; i++) {
    const float *xi = x + (size_t)i * d;
    float *yi = y + (size_t)i * d;
    float r = eng_km_rms_rstd(eng_k_sumsq_row(xi, (size_t)d), d, eps);
    rstd[i] = r;
    for (int j = 0; j < d; j++) yi[j] = eng_km_rms_y(xi[j], r, w[j]);
  }
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

// dx = r·(dxhat − xhat·mean(dxhat∘xhat)) with dxhat = dy∘w (eng_km_rms_dx).
// dw[j] += Σ_i dy[i][j]·xhat[i][j]: threads own column blocks and sum their
// columns over the rows in order (in double), so nothing depends on how many
// threads there are.
void eng_k_rmsnorm_bwd(float *dx, float *dw, const float *dy, const float *x, const float *w,
                       const float *rstd, int n, int d, int accumulate_dx) {
  enum { COLS = 64 };
  int nblk = (d + COLS - 1) / COLS;
#pragma omp parallel if ((size_t)n * (size_t)d >= ENG_K_PAR_MIN)
  {
    if (dx) {
#pragma omp for schedule(static) nowait
      for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * d, *dyi = dy + (size_t)i * d;
        float *dxi = dx + (size_t)i * d;
        float r = rstd[i];
        float c = eng_km_rms_c(dot_dxhat_xhat(dyi, w, xi, r, d), d);
        if (accumulate_dx)
          for (int j = 0; j < d; j++) dxi[j] += eng_km_rms_dx(dyi[j], w[j], xi[j], r, c);
        else
          for (int j = 0; j < d; j++) dxi[j] = eng_km_rms_dx(dyi[j], w[j], xi[j], r, c);
      }
    }
    if (dw) {
#pragma omp for schedule(static)
      for (int blk = 0; blk < nblk; blk++) {
        int j0 = blk * COLS, m = d - j0 < COLS ? d - j0 : COLS;
        double acc[COLS] = {0};
        for (int i = 0; i < n; i++) {
          const float *xi = x + (size_t)i * d + j0, *dyi = dy + (size_t)i * d + j0;
          float r = rstd[i];
          for (int j = 0; j < m; j++) acc[j] += eng_km_rms_dw_term(dyi[j], xi[j], r);
        }
        for (int j = 0; j < m; j++) dw[j0 + j] += (float)acc[j];
      }
    }
  }
}
