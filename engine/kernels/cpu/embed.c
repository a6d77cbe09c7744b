// Token embedding lookup and its scatter-add backward.
#include "kernels/kernels.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "common/bf16.h"
#include "common/err.h"
#include "kernels/cpu/kmath.h"

void eng_k_embed_fwd(float *x, const float *table, const int32_t *ids, int n, int d) {
#pragma omp parallel for schedule(static) if ((size_t)n * (size_t)d >= ENG_K_PAR_MIN)
  for (int i = 0; i < n; i++) memcpy(x + (size_t)i * d, table + (size_t)ids[i] * d, sizeof(float) * (size_t)d);
}

void eng_k_embed_fwd_bf16(float *x, const uint16_t *table, const int32_t *ids, int n, int d) {
#pragma omp parallel for schedule(static) if ((size_t)n * (size_t)d >= ENG_K_PAR_MIN)
  for (int i = 0; i < n; i++) eng_bf16_to_f32_here(x + (size_t)i * d, table + (size_t)ids[i] * d, (size_t)d);
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

int eng_k_embed_bwd_group(float *dtable, const float *dx, const int32_t *ids, int n, int d) {
  if (n <= 0) return 0;
  // Each token's slot: its row's first occurrence in the group (a hash of
  // the ids, open addressing over twice as many places as tokens).
  size_t cap = 2;
  while (cap < 2 * (size_t)n) cap *= 2;
  int32_t *place = malloc(cap * sizeof *place), *slot = malloc((size_t)n * sizeof *slot);
  int32_t *row = malloc((size_t)n * sizeof *row);
  float *acc = malloc((size_t)n * (size_t)d * sizeof *acc);
  if (!place || !slot || !row || !acc) {
    free(place), free(slot), free(row), free(acc);
    return ENG_ENOMEM;
  }
  memset(place, 0xff, cap * sizeof *place);
  int u = 0;
  for (int i = 0; i < n; i++) {
    size_t h = ((uint32_t)ids[i] * 2654435761u) & (cap - 1);
    while (place[h] >= 0 && row[place[h]] != ids[i]) h = (h + 1) & (cap - 1);
    if (place[h] < 0) place[h] = u, row[u++] = ids[i];
    slot[i] = place[h];
  }
  enum { COLS = 64 };
  int nblk = (d + COLS - 1) / COLS;
#pragma omp parallel for schedule(static) if ((size_t)n * (size_t)d >= ENG_K_PAR_MIN)
  for (int blk = 0; blk < nblk; blk++) {
    int j0 = blk * COLS, m = d - j0 < COLS ? d - j0 : COLS;
    for (int k = 0; k < u; k++) memset(acc + (size_t)k * d + j0, 0, sizeof(float) * (size_t)m);
    for (int i = 0; i < n; i++) {
      float *a = acc + (size_t)slot[i] * d + j0;
      const float *g = dx + (size_t)i * d + j0;
      for (int j = 0; j < m; j++) a[j] += g[j];
    }
    for (int k = 0; k < u; k++) {
      float *t = dtable + (size_t)row[k] * d + j0;
      const float *a = acc + (size_t)k * d + j0;
      for (int j = 0; j < m; j++) t[j] += a[j];
    }
  }
  free(place), free(slot), free(row), free(acc);
  return 0;
}
