// The attention output gate of Qwen3.5's full-attention layers:
// y = att · sigmoid(gate), per head, with the gate read where the q
// projection puts it (after each head's query values).
#include "kernels/kernels.h"

#include "kernels/cpu/kmath.h"

void eng_k_sgate_fwd(float *y, const float *x, const float *g, int ldg, int ghd, int n, int heads, int hd) {
  const size_t ld = (size_t)heads * hd;
#pragma omp parallel for schedule(static) if (eng_k_team((size_t)n * ld))
  for (int i = 0; i < n; i++)
    for (int h = 0; h < heads; h++) {
      const float *gi = g + (size_t)i * ldg + (size_t)h * ghd, *xi = x + i * ld + (size_t)h * hd;
      float *yi = y + i * ld + (size_t)h * hd;
      for (int j = 0; j < hd; j++) yi[j] = xi[j] * eng_km_sigmoid(gi[j]);
    }
}

// dx = dy·s, dg = dy·x·s·(1 − s), s = sigmoid(g).
void eng_k_sgate_bwd(float *dx, float *dg, const float *dy, const float *x, const float *g, int ldg, int ghd, int n,
                     int heads, int hd) {
  const size_t ld = (size_t)heads * hd;
#pragma omp parallel for schedule(static) if (eng_k_team((size_t)n * ld))
  for (int i = 0; i < n; i++)
    for (int h = 0; h < heads; h++) {
      const size_t o = i * ld + (size_t)h * hd, og = (size_t)i * ldg + (size_t)h * ghd;
      for (int j = 0; j < hd; j++) {
        const float s = eng_km_sigmoid(g[og + j]);
        dg[og + j] = ((dy[o + j] * x[o + j]) * s) * (1.0f - s);
        dx[o + j] = dy[o + j] * s;
      }
    }
}
