// Causal GQA attention backward, FlashAttention-2 style: P is recomputed from
// q, k and the saved lse one tile at a time, with D = rowsum(dO∘O):
//   dV += Pᵀ·dO, dP = dO·Vᵀ, dS = P∘(dP − D), dQ += dS·K·scale, dK += dSᵀ·Q·scale.
// One OpenMP item is a (batch, kv head): it owns dK/dV of that kv head and dQ of
// its query group, so the group's contributions add in a fixed order (key
// tile, then query head, then query tile) with no atomics and no scratch.
#include "kernels/kernels.h"

#include <math.h>
#include <omp.h>

#include "kernels/cpu/kmath.h"
#include "kernels/cpu/tile.h"

enum { W = ENG_K_ATT_TILE };

// Per-thread tile buffers. Gradients of a key tile are held transposed
// ([hd][key]) so that the SIMD dimension is a tile dimension.
typedef struct bwd_tiles {
  float kT[ENG_K_MAX_HD * W], vT[ENG_K_MAX_HD * W];   // packed key tile
  float dkT[ENG_K_MAX_HD * W], dvT[ENG_K_MAX_HD * W]; // its gradients
  float dqT[ENG_K_MAX_HD * W];                        // one (query, key) tile's dQ part
  float p[W * W], ds[W * W], dsT[W * W];              // [query][key] and [key][query]
} bwd_tiles;

typedef struct bwd_args {
  size_t qs, ks;   // row strides of [.., H, hd] and [.., KV, hd] tensors
  int T, hd;
  float scale;
} bwd_args;

// Adds the contribution of query tile qt of one head to the key tile kt:
// q, o, dout, dq point at row 0 of the head, lse at its [T] row, k at row 0
// of the kv head.
static void tile_pair(bwd_tiles *w, const bwd_args *a, float *dq, const float *dout, const float *o,
                      const float *lse, const float *q, const float *k, int qt, int kt) {
  int i0 = qt * W, m = a->T - i0 < W ? a->T - i0 : W;
  int j0 = kt * W, n = a->T - j0 < W ? a->T - j0 : W;
  const float *qi = q + (size_t)i0 * a->qs, *doi = dout + (size_t)i0 * a->qs, *oi = o + (size_t)i0 * a->qs;
  eng_k_tile_gemm(w->p, W, qi, a->qs, 1, w->kT, W, m, a->hd, W, 0);   // S
  eng_k_tile_gemm(w->ds, W, doi, a->qs, 1, w->vT, W, m, a->hd, W, 0); // dP
  for (int i = 0; i < m; i++) {
    float D = eng_k_dot_row(doi + (size_t)i * a->qs, oi + (size_t)i * a->qs, (size_t)a->hd);
    float L = lse[i0 + i];
    float *p = w->p + (size_t)i * W, *ds = w->ds + (size_t)i * W;
    // Keys after the query exist only in the diagonal tile (j0 == i0); keys
    // past T only in the last tile, which is then diagonal too.
    int jend = qt == kt ? i + 1 : n;
    for (int j = 0; j < W; j++) {
      float pij = j < jend ? eng_k_expf(p[j] * a->scale - L) : 0.0f;
      p[j] = pij;
      ds[j] = (pij * (ds[j] - D)) * a->scale;
    }
  }
  for (int i = 0; i < m; i++)
    for (int j = 0; j < W; j++) w->dsT[(size_t)j * W + i] = w->ds[(size_t)i * W + j];
  for (int j = 0; j < W; j++)
    for (int i = m; i < W; i++) w->dsT[(size_t)j * W + i] = 0.0f;
  // dvT[c][j] += Σ_i dO[i][c]·P[i][j] ; dkT[c][j] += Σ_i Q[i][c]·dS[i][j]
  eng_k_tile_gemm(w->dvT, W, doi, 1, a->qs, w->p, W, a->hd, m, W, 1);
  eng_k_tile_gemm(w->dkT, W, qi, 1, a->qs, w->ds, W, a->hd, m, W, 1);
  // dqT[c][i] = Σ_j K[j][c]·dS[i][j], added to dq rows
  eng_k_tile_gemm(w->dqT, W, k + (size_t)j0 * a->ks, 1, a->ks, w->dsT, W, a->hd, n, W, 0);
  for (int i = 0; i < m; i++) {
    float *d = dq + (size_t)(i0 + i) * a->qs;
    for (int c = 0; c < a->hd; c++) d[c] += w->dqT[(size_t)c * W + i];
  }
}

void eng_k_attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *out,
                         const float *lse, const float *q, const float *k, const float *v,
                         int B, int T, int H, int KV, int hd) {
  if (B <= 0 || T <= 0) return;
  const int G = H / KV, nt = (T + W - 1) / W;
  const bwd_args a = {(size_t)H * hd, (size_t)KV * hd, T, hd, 1.0f / sqrtf((float)hd)};
#pragma omp parallel if ((size_t)B * H * T * hd >= ENG_K_PAR_MIN)
  {
    bwd_tiles w;
#pragma omp for schedule(dynamic, 1)
    for (int it = 0; it < B * KV; it++) {
      int b = it / KV, g = it % KV;
      size_t qoff = (size_t)b * T * a.qs + (size_t)g * G * hd, koff = (size_t)b * T * a.ks + (size_t)g * hd;
      for (int t = 0; t < T; t++) memset(dq + qoff + (size_t)t * a.qs, 0, sizeof(float) * (size_t)G * hd);
      for (int kt = 0; kt < nt; kt++) {
        int j0 = kt * W, n = T - j0 < W ? T - j0 : W;
        eng_k_tile_pack_t(w.kT, k + koff + (size_t)j0 * a.ks, a.ks, n, hd, W);
        eng_k_tile_pack_t(w.vT, v + koff + (size_t)j0 * a.ks, a.ks, n, hd, W);
        memset(w.dkT, 0, sizeof(float) * (size_t)hd * W);
        memset(w.dvT, 0, sizeof(float) * (size_t)hd * W);
        for (int r = 0; r < G; r++) {
          size_t ho = qoff + (size_t)r * hd;
          const float *lse_h = lse + ((size_t)b * H + (size_t)g * G + r) * T;
          for (int qt = kt; qt < nt; qt++)
            tile_pair(&w, &a, dq + ho, dout + ho, out + ho, lse_h, q + ho, k + koff, qt, kt);
        }
        for (int j = 0; j < n; j++) {
          float *dkj = dk + koff + (size_t)(j0 + j) * a.ks, *dvj = dv + koff + (size_t)(j0 + j) * a.ks;
          for (int c = 0; c < hd; c++) {
            dkj[c] = w.dkT[(size_t)c * W + j];
            dvj[c] = w.dvT[(size_t)c * W + j];
          }
        }
      }
    }
  }
}
