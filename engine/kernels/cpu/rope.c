// Rotary embedding, rotate-half convention (Llama/Qwen in transformers):
// out[i] = x[i]·cos − x[i+h]·sin, out[i+h] = x[i+h]·cos + x[i]·sin, h = rd/2,
// angle = pos · inv_freq[i], over the first rd of each head's hd values (rd =
// hd but for a partial rotary factor; the rest pass through). The angle and
// cos/sin are computed in fp32 the way transformers does, from the caller's
// table (model/rope.h), cos and sin then times its scale as transformers
// scales them.
#include "kernels/kernels.h"

#include <math.h>
#include <omp.h>

#include "kernels/cpu/kmath.h"

// Rotates every head of every row t of each batch by the angles of its
// position (pos[b][t], or t without pos). cos/sin are computed again only
// when a row's position differs from the previous batch's at the same t:
// without pos, once per t for all batches. sign = +1 applies the rotation,
// −1 its inverse (the transpose), which is the backward.
static void rotate(float *x, int ld, const int32_t *pos, int B, int T, int heads, int hd, const eng_k_rope *r,
                   float sign) {
  const int h = r->rd / 2;
  const float *inv_freq = r->inv_freq;
#pragma omp parallel for schedule(static) if ((size_t)B * T * heads * hd >= ENG_K_PAR_MIN)
  for (int t = 0; t < T; t++) {
    float c[ENG_K_MAX_HD / 2], s[ENG_K_MAX_HD / 2];
    int at = -1; // the position c and s hold
    for (int b = 0; b < B; b++) {
      int p = pos ? pos[(size_t)b * T + t] : t;
      if (p != at) {
        for (int i = 0; i < h; i++) {
          float a = eng_km_rope_angle(p, inv_freq[i]);
          c[i] = cosf(a) * r->scale;
          s[i] = sign * (sinf(a) * r->scale);
        }
        at = p;
      }
      for (int k = 0; k < heads; k++) {
        float *x1 = x + ((size_t)b * T + t) * ld + (size_t)k * hd, *x2 = x1 + h;
        for (int i = 0; i < h; i++) {
          float u = x1[i], v = x2[i];
          x1[i] = eng_km_rope_lo(u, v, c[i], s[i]);
          x2[i] = eng_km_rope_hi(u, v, c[i], s[i]);
        }
      }
    }
  }
}

void eng_k_rope_fwd(float *x, int ld, const int32_t *pos, int B, int T, int heads, int hd, const eng_k_rope *r) {
  rotate(x, ld, pos, B, T, heads, hd, r, 1.0f);
}

void eng_k_rope_bwd(float *dx, int ld, const int32_t *pos, int B, int T, int heads, int hd, const eng_k_rope *r) {
  rotate(dx, ld, pos, B, T, heads, hd, r, -1.0f);
}
