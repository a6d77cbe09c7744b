// Linear layer y = x·Wᵀ + b with Hugging Face's [out, in] weights, on
// OpenBLAS sgemm. OpenBLAS never splits the k dimension across threads, so
// every output element is the same sum whatever the thread count.
#include "kernels/kernels.h"

#include <cblas.h>
#include <omp.h>

#include "kernels/cpu/kmath.h"

void eng_k_linear_fwd(float *y, const float *x, const float *w, const float *b, int n, int in, int out) {
  if (n <= 0 || out <= 0) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out, in, 1.0f, x, in, w, in, 0.0f, y, out);
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
  if (dx)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, in, out, 1.0f, dy, out, w, in,
                accumulate_dx ? 1.0f : 0.0f, dx, in);
  if (dw)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, n, 1.0f, dy, out, x, in, 1.0f, dw, in);
  if (db) bias_grad(db, dy, n, out);
}
