// The elementwise and per-head blocks around the gated delta rule in a Gated
// DeltaNet layer (Qwen3.5's linear attention), as transformers computes them:
// the causal depthwise conv with SiLU over q|k|v, the L2 norm of q and k, and
// the gated RMSNorm of the rule's output. The delta rule itself is
// deltarule.c.
#include "kernels/kernels.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kmath.h"

// ---- causal depthwise conv + SiLU ----------------------------------------------

// First token of t's record in row b (0 without pos).
static int rec_start(const int32_t *pos, int b, int T, int t) { return pos ? t - pos[(size_t)b * T + t] : 0; }

// Channels per work item: a block's rows are read once per tap, and dw's sum
// over rows stays on one thread, in row order.
enum { CB = 16 };

void eng_k_conv_silu_fwd(float *y, float *u, const float *x, int ldx, const float *w, const int32_t *pos, int B,
                         int T, int C, int K) {
  const int nblk = (C + CB - 1) / CB;
#pragma omp parallel for schedule(static) if (eng_k_team((size_t)B * T * C * K))
  for (int cb = 0; cb < nblk; cb++) {
    const int c0 = cb * CB, c1 = c0 + CB < C ? c0 + CB : C;
    for (int b = 0; b < B; b++)
      for (int t = 0; t < T; t++) {
        const size_t r = (size_t)b * T + t;
        const int s0 = rec_start(pos, b, T, t);
        for (int c = c0; c < c1; c++) {
          float acc = 0;
          for (int j = 0; j < K; j++) {
            const int s = t + j - (K - 1);
            if (s >= s0) acc = fmaf(w[(size_t)c * K + j], x[((size_t)b * T + s) * ldx + c], acc);
          }
          u[r * C + c] = acc;
          y[r * C + c] = eng_km_silu(acc);
        }
      }
  }
}

void eng_k_conv_silu_bwd(float *dx, int lddx, float *dw, const float *dy, const float *u, const float *x, int ldx,
                         const float *w, const int32_t *pos, int B, int T, int C, int K) {
  const int nblk = (C + CB - 1) / CB;
#pragma omp parallel if (eng_k_team((size_t)B * T * C * K))
  {
    // du = dy·silu'(u) of one row's tokens for the block's channels, formed
    // once and read by every tap.
    float *du = malloc(sizeof(float) * (size_t)T * CB);
    if (!du) abort(); // a row of a block: out of memory here is not recoverable
#pragma omp for schedule(static)
    for (int cb = 0; cb < nblk; cb++) {
      const int c0 = cb * CB, c1 = c0 + CB < C ? c0 + CB : C;
      double acc[CB * 8]; // dw of the block's channels, taps up to 8 (ENG_K_CONV_MAX)
      memset(acc, 0, sizeof acc);
      for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
          const size_t rt = (size_t)b * T + t;
          for (int c = c0; c < c1; c++) du[(size_t)t * CB + (c - c0)] = eng_km_silu_bwd(dy[rt * C + c], u[rt * C + c]);
        }
        for (int s = 0; s < T; s++) {
          const size_t r = (size_t)b * T + s;
          // dx[s] = Σ_j w[j]·du[s − j + K − 1] over the tokens t ≥ s of s's record.
          for (int c = c0; c < c1; c++) {
            float d = 0;
            for (int j = K - 1; j >= 0; j--) {
              const int t = s - j + (K - 1);
              if (t >= T || rec_start(pos, b, T, t) > s) continue;
              d = fmaf(w[(size_t)c * K + j], du[(size_t)t * CB + (c - c0)], d);
            }
            dx[r * lddx + c] = d;
          }
          // dw[c][j] += du[s]·x[s + j − (K − 1)], s as the output token here.
          const int s0 = rec_start(pos, b, T, s);
          for (int c = c0; c < c1; c++) {
            const float g = du[(size_t)s * CB + (c - c0)];
            for (int j = 0; j < K; j++) {
              const int i = s + j - (K - 1);
              if (i >= s0) acc[(c - c0) * 8 + j] += (double)(g * x[((size_t)b * T + i) * ldx + c]);
            }
          }
        }
      }
      for (int c = c0; c < c1; c++)
        for (int j = 0; j < K; j++) dw[(size_t)c * K + j] += (float)acc[(c - c0) * 8 + j];
    }
    free(du);
  }
}

// ---- L2 norm per head ------------------------------------------------------------

void eng_k_l2norm_fwd(float *y, int ldy, float *rstd, const float *x, int ldx, int n, int heads, int hd, float eps) {
#pragma omp parallel for schedule(static) if (eng_k_team((size_t)n * heads * hd))
  for (int i = 0; i < n; i++)
    for (int h = 0; h < heads; h++) {
      const float *xi = x + (size_t)i * ldx + (size_t)h * hd;
      float *yi = y + (size_t)i * ldy + (size_t)h * hd;
      const float r = eng_km_l2_rstd(eng_k_sumsq_row(xi, (size_t)hd), eps);
      rstd[(size_t)i * heads + h] = r;
      for (int j = 0; j < hd; j++) yi[j] = xi[j] * r;
    }
}

// dx = r·(dy − y·(y·dy)), y = x·r.
void eng_k_l2norm_bwd(float *dx, int lddx, const float *dy, int lddy, const float *x, int ldx, const float *rstd,
                      int n, int heads, int hd) {
#pragma omp parallel for schedule(static) if (eng_k_team((size_t)n * heads * hd))
  for (int i = 0; i < n; i++)
    for (int h = 0; h < heads; h++) {
      const float *xi = x + (size_t)i * ldx + (size_t)h * hd, *dyi = dy + (size_t)i * lddy + (size_t)h * hd;
      float *dxi = dx + (size_t)i * lddx + (size_t)h * hd;
      const float r = rstd[(size_t)i * heads + h];
      double acc[8] = {0};
      int j = 0;
      for (; j + 8 <= hd; j += 8)
        for (int l = 0; l < 8; l++) acc[l] += (double)(xi[j + l] * r) * dyi[j + l];
      for (int l = 0; j < hd; j++, l++) acc[l] += (double)(xi[j] * r) * dyi[j];
      const float dot = (float)eng_km_sum8_tree(acc);
      for (j = 0; j < hd; j++) dxi[j] = r * (dyi[j] - (xi[j] * r) * dot);
    }
}

// ---- gated RMSNorm -------------------------------------------------------------------

// y = (w·(x·r))·silu(z) over each head of hd; x, z, y [n, heads·hd].
void eng_k_gatednorm_fwd(float *y, float *rstd, const float *x, const float *z, int ldz, const float *w, int n,
                         int heads, int hd, float eps) {
  const size_t ld = (size_t)heads * hd;
#pragma omp parallel for schedule(static) if (eng_k_team((size_t)n * ld))
  for (int i = 0; i < n; i++)
    for (int h = 0; h < heads; h++) {
      const float *xi = x + i * ld + (size_t)h * hd, *zi = z + (size_t)i * ldz + (size_t)h * hd;
      float *yi = y + i * ld + (size_t)h * hd;
      const float r = eng_km_rms_rstd(eng_k_sumsq_row(xi, (size_t)hd), hd, eps);
      rstd[(size_t)i * heads + h] = r;
      for (int j = 0; j < hd; j++) yi[j] = (w[j] * (xi[j] * r)) * eng_km_silu(zi[j]);
    }
}

// dn = dy·silu(z) (the norm's output gradient, into dn [n, heads·hd]), dz =
// dy·(w·x̂)·silu'(z); then the norm's backward (dx, dw +=) from dn.
void eng_k_gatednorm_bwd(float *dx, float *dw, float *dz, int lddz, float *dn, const float *dy, const float *x,
                         const float *z, int ldz, const float *w, const float *rstd, int n, int heads, int hd) {
  const size_t ld = (size_t)heads * hd;
#pragma omp parallel for schedule(static) if (eng_k_team((size_t)n * ld))
  for (int i = 0; i < n; i++)
    for (int h = 0; h < heads; h++) {
      const size_t o = i * ld + (size_t)h * hd;
      const float *zi = z + (size_t)i * ldz + (size_t)h * hd;
      float *dzi = dz + (size_t)i * lddz + (size_t)h * hd;
      const float r = rstd[(size_t)i * heads + h];
      for (int j = 0; j < hd; j++) {
        dn[o + j] = dy[o + j] * eng_km_silu(zi[j]);
        dzi[j] = eng_km_silu_bwd(dy[o + j] * (w[j] * (x[o + j] * r)), zi[j]);
      }
    }
  eng_k_headnorm_bwd(dx, dw, dn, (int)ld, x, (int)ld, w, rstd, n, heads, hd);
}
