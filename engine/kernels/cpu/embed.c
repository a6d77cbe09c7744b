// Token embedding lookup and its scatter-add backward.
#include "kernels/kernels.h"

#include <omp.h>
#include <string.h>

#include "kernels/cpu/kmath.h"

void eng_k_embed_fwd(float *x, const float *table, const int32_t *ids, int n, int d) {
#pragma omp parallel for schedule(static) if ((size_t)n * (size_t)d >= ENG_K_PAR_MIN)
  for (int i = 0; i < n; i++) memcpy(x + (size_t)i * d, table + (size_t)ids[i] * d, sizeof(float) * (size_t)d);
}

// Threads own column blocks of the table and add the rows in i order, so a
// token that repeats accumulates in the same order whatever the thread count.
void eng_k_embed_bwd(float *dtable, const float *dx, const int32_t *ids, int n, int d) {
  enum { COLS = 64 };
  int nblk = (d + COLS - 1) / COLS;
#pragma omp parallel for schedule(static) if ((size_t)n * (size_t)d >= ENG_K_PAR_MIN)
  for (int blk = 0; blk < nblk; blk++) {
    int j0 = blk * COLS, m = d - j0 < COLS ? d - j0 : COLS;
    for (int i = 0; i < n; i++) {
      float *t = dtable + (size_t)ids[i] * d + j0;
      const float *g = dx + (size_t)i * d + j0;
      for (int j = 0; j < m; j++) t[j] += g[j];
    }
  }
}
