// Linear layer y = x·Wᵀ + b with Hugging Face's [out, in] weights, on
// eng_k_sgemm: a row's y and dx do not depend on the thread count or on how
// the rows are split into calls (micro-batches).
#include "kernels/kernels.h"

#include <omp.h>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/kmath.h"

void eng_k_linear_fwd(float *y, const float *x, const float *w, const float *b, int n, int in, int out) {
  if (n <= 0 || out <= 0) return;
  eng_k_sgemm(0, 1, n, out, in, x, in, w, in, 0.0f, y, out);
  if (!b) return;
  // The bias is added to the finished product: one rounding per element.
#pragma omp parallel for schedule(static) if ((size_t)n * (size_t)out >= ENG_K_PAR_MIN)
  for (int i = 0; i < n; i++) {
    float *yi = y + (size_t)i * out;
    for (int j = 0; j < out; j++) yi[j] += b[j];
  }
}

// db[j] += Σ_i dy[i][j]: columns are split among threads and each column is
// summed over the rows in order, in double, so no partials need combining.
static void bias_grad(float *db, const float *dy, int n, int out) {
  enum { COLS = 64 };
  int nblk = (out + COLS - 1) / COLS;
#pragma omp parallel for schedule(static) if ((size_t)n * (size_t)out >= ENG_K_PAR_MIN)
  for (int blk = 0; blk < nblk; blk++) {
    int j0 = blk * COLS, m = out - j0 < COLS ? out - j0 : COLS;
    double acc[COLS] = {0};
    for (int i = 0; i < n; i++) {
      const float *r = dy + (size_t)i * out + j0;
      for (int j = 0; j < m; j++) acc[j] += (double)r[j];
    }
    for (int j = 0; j < m; j++) db[j0 + j] += (float)acc[j];
  }
}

void eng_k_linear_bwd(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w,
                      int n, int in, int out, int accumulate_dx) {
  if (n <= 0 || in <= 0 || out <= 0) return;
  if (dx) eng_k_sgemm(0, 0, n, in, out, dy, out, w, in, accumulate_dx ? 1.0f : 0.0f, dx, in);
  if (dw) eng_k_sgemm(1, 0, out, in, n, dy, out, x, in, 1.0f, dw, in);
  if (db) bias_grad(db, dy, n, out);
}
