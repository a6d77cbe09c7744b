// Linear layer y = x·Wᵀ + b with Hugging Face's [out, in] weights, on
// eng_k_sgemm: a row's y and dx do not depend on the thread count or on how
// the rows are split into calls (micro-batches).
#include "kernels/kernels.h"

#include <omp.h>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/kmath.h"

// The rows' epilogue: the bias added to the finished product (one rounding
// per element), then the caller's.
typedef struct fwd_rows {
  float *y;
  const float *b;
  int out;
  eng_k_rows_fn then;
  void *ctx;
} fwd_rows;

static void fwd_rows_run(void *c, int r0, int r1) {
  fwd_rows *f = c;
  if (f->b)
    for (int i = r0; i < r1; i++) {
      float *yi = f->y + (size_t)i * f->out;
      for (int j = 0; j < f->out; j++) yi[j] += f->b[j];
    }
  if (f->then) f->then(f->ctx, r0, r1);
}

void eng_k_linear_fwd_then(float *y, const float *x, const float *w, const float *b, int n, int in, int out,
                           eng_k_rows_fn then, void *ctx) {
  if (n <= 0 || out <= 0) return;
  fwd_rows f = {y, b, out, then, ctx};
  eng_k_sgemm_then(0, 1, n, out, in, x, in, w, in, 0.0f, y, out, b || then ? fwd_rows_run : NULL, &f);
}

void eng_k_linear_fwd(float *y, const float *x, const float *w, const float *b, int n, int in, int out) {
  eng_k_linear_fwd_then(y, x, w, b, n, in, out, NULL, NULL);
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

void eng_k_linear_bwd_then(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w, int n,
                           int in, int out, int accumulate_dx, eng_k_rows_fn then, void *ctx) {
  if (n <= 0 || in <= 0 || out <= 0) return;
  if (dx) eng_k_sgemm_then(0, 0, n, in, out, dy, out, w, in, accumulate_dx ? 1.0f : 0.0f, dx, in, then, ctx);
  if (dw) eng_k_sgemm(1, 0, out, in, n, dy, out, x, in, 1.0f, dw, in);
  if (db) bias_grad(db, dy, n, out);
}

void eng_k_linear_bwd(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w,
                      int n, int in, int out, int accumulate_dx) {
  eng_k_linear_bwd_then(dx, dw, db, dy, x, w, n, in, out, accumulate_dx, NULL, NULL);
}
