// RMSNorm as transformers computes it: var = mean(x²) taken in fp32,
// xhat = x · (1/sqrt(var + eps)), y = w · xhat. The sum of squares runs in
// double and is rounded once, so var is the fp32 value of the exact mean.
#include "kernels/kernels.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>

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

// dx = r·(dxhat − xhat·mean(dxhat∘xhat)) with dxhat = dy∘w (eng_km_rms_dx),
// plus dres when given (the residual's gradient, added in the same pass).
// dw[j] += Σ_i dy[i][j]·xhat[i][j], summed in double over DW_CHUNKS fixed row
// ranges (each over its rows in order) that are then added in range order:
// the ranges give both threads work when d has few column blocks (the q/k
// norms have hd columns), and nothing depends on how many threads there are.
enum { DW_COLS = 64, DW_CHUNKS = 8 };

static void dw_chunk(double *acc, const float *dy, const float *x, const float *rstd, int r0, int r1, int d,
                     int j0, int m) {
  for (int j = 0; j < m; j++) acc[j] = 0.0;
  for (int i = r0; i < r1; i++) {
    const float *xi = x + (size_t)i * d + j0, *dyi = dy + (size_t)i * d + j0;
    float r = rstd[i];
    for (int j = 0; j < m; j++) acc[j] += eng_km_rms_dw_term(dyi[j], xi[j], r);
  }
}

void eng_k_rmsnorm_bwd(float *dx, float *dw, const float *dy, const float *dres, const float *x, const float *w,
                       const float *rstd, int n, int d) {
  int nblk = (d + DW_COLS - 1) / DW_COLS;
  double *part = dw ? malloc(sizeof(double) * DW_CHUNKS * (size_t)nblk * DW_COLS) : NULL;
  if (dw && !part) abort(); // a few KiB: out of memory here is not recoverable
#pragma omp parallel if ((size_t)n * (size_t)d >= ENG_K_PAR_MIN)
  {
    if (dx) {
#pragma omp for schedule(static) nowait
      for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * d, *dyi = dy + (size_t)i * d;
        float *dxi = dx + (size_t)i * d;
        float r = rstd[i];
        float c = eng_km_rms_c(dot_dxhat_xhat(dyi, w, xi, r, d), d);
        if (dres) {
          const float *ri = dres + (size_t)i * d;
          for (int j = 0; j < d; j++) dxi[j] = ri[j] + eng_km_rms_dx(dyi[j], w[j], xi[j], r, c);
        } else {
          for (int j = 0; j < d; j++) dxi[j] = eng_km_rms_dx(dyi[j], w[j], xi[j], r, c);
        }
      }
    }
    if (dw) {
#pragma omp for schedule(static)
      for (int it = 0; it < nblk * DW_CHUNKS; it++) {
        int blk = it / DW_CHUNKS, ch = it % DW_CHUNKS, j0 = blk * DW_COLS;
        int m = d - j0 < DW_COLS ? d - j0 : DW_COLS;
        int r0 = (int)((long long)n * ch / DW_CHUNKS), r1 = (int)((long long)n * (ch + 1) / DW_CHUNKS);
        dw_chunk(part + (size_t)it * DW_COLS, dy, x, rstd, r0, r1, d, j0, m);
      }
#pragma omp for schedule(static)
      for (int blk = 0; blk < nblk; blk++) {
        int j0 = blk * DW_COLS, m = d - j0 < DW_COLS ? d - j0 : DW_COLS;
        for (int j = 0; j < m; j++) {
          double acc = 0.0;
          for (int ch = 0; ch < DW_CHUNKS; ch++) acc += part[((size_t)blk * DW_CHUNKS + ch) * DW_COLS + j];
          dw[j0 + j] += (float)acc;
        }
      }
    }
  }
  free(part);
}
