// Causal GQA attention backward, FlashAttention-2 style: P is recomputed from
// q, k and the saved lse one tile at a time, with D = rowsum(dO∘O):
//   dV += Pᵀ·dO, dP = dO·Vᵀ, dS = P∘(dP − D), dQ += dS·K·scale, dK += dSᵀ·Q·scale.
// One OpenMP item is a (batch, kv head): it owns dK/dV of that kv head and dQ
// of its query group, accumulated in place in a fixed order (query head, query
// tile, key tile), with no atomics and no scratch.
//
// A query tile is packed transposed once (Qᵀ, dOᵀ) with its D and lse; each
// key tile then forms Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ, whose SIMD dimension is the
// query index, so the softmax terms are plain vectors, and the three gradient
// products read Pᵀ/dSᵀ in place and add into dq, dk and dv rows directly.
#include "kernels/kernels.h"

#include <math.h>
#include <omp.h>

// gcc's tuning for recent x86 prefers 256-bit vectors; the tile products run
// twice as many FMAs per cycle at 512 where the -march has them (a no-op
// where it does not).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC target("prefer-vector-width=512")
#endif
#include "kernels/cpu/kmath.h"
#include "kernels/cpu/tile.h"

enum { W = ENG_K_ATT_TILE };

// Per-thread buffers of one query tile.
typedef struct bwd_tile {
  float qT[ENG_K_MAX_HD * W], doT[ENG_K_MAX_HD * W]; // packed [hd][query]
  float D[W], L[W];                                  // rowsum(dO∘O), lse
  float pT[W * W], dsT[W * W];                       // [key][query]
} bwd_tile;

typedef struct bwd_args {
  size_t qs, ks;   // row strides of [.., H, hd] and [.., KV, hd] tensors
  int T, hd;
  float scale;
} bwd_args;

// Adds key tile kt's part of the gradients of query tile qt (packed in t):
// dq points at row 0 of the query head, k, v, dk, dv at row 0 of its kv head,
// q and dout at row i0 of the query tile.
static void key_tile(bwd_tile *t, const bwd_args *a, float *dq, float *dk, float *dv, const float *q,
                     const float *dout, const float *k, const float *v, int qt, int kt) {
  int i0 = qt * W, m = a->T - i0 < W ? a->T - i0 : W;
  int j0 = kt * W, n = a->T - j0 < W ? a->T - j0 : W;
  const float *kj = k + (size_t)j0 * a->ks, *vj = v + (size_t)j0 * a->ks;
  eng_k_tile_gemm(t->pT, W, kj, a->ks, 1, t->qT, W, n, a->hd, W, 0);   // Sᵀ[j][i]
  eng_k_tile_gemm(t->dsT, W, vj, a->ks, 1, t->doT, W, n, a->hd, W, 0); // dPᵀ[j][i]
  for (int j = 0; j < n; j++) {
    float *p = t->pT + (size_t)j * W, *ds = t->dsT + (size_t)j * W;
    for (int i = 0; i < W; i++) {
      // Only the diagonal tile (j0 == i0) has keys after the query.
      float pij = qt == kt && j > i ? 0.0f : eng_km_attn_p(p[i], a->scale, t->L[i]);
      p[i] = pij;
      ds[i] = eng_km_attn_ds(pij, ds[i], t->D[i], a->scale);
    }
  }
  // dv[j][c] += Σ_i Pᵀ[j][i]·dO[i][c] ; dk[j][c] += Σ_i dSᵀ[j][i]·Q[i][c]
  eng_k_tile_gemm(dv + (size_t)j0 * a->ks, a->ks, t->pT, W, 1, dout, a->qs, n, m, a->hd, 1);
  eng_k_tile_gemm(dk + (size_t)j0 * a->ks, a->ks, t->dsT, W, 1, q, a->qs, n, m, a->hd, 1);
  // dq[i][c] += Σ_j dSᵀ[j][i]·K[j][c]
  eng_k_tile_gemm(dq + (size_t)i0 * a->qs, a->qs, t->dsT, 1, W, kj, a->ks, m, n, a->hd, 1);
}

void eng_k_attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *out,
                         const float *lse, const float *q, const float *k, const float *v,
                         int B, int T, int H, int KV, int hd) {
  if (B <= 0 || T <= 0) return;
  const int G = H / KV, nt = (T + W - 1) / W;
  const bwd_args a = {(size_t)H * hd, (size_t)KV * hd, T, hd, 1.0f / sqrtf((float)hd)};
#pragma omp parallel if ((size_t)B * H * T * hd >= ENG_K_PAR_MIN)
  {
    bwd_tile t;
#pragma omp for schedule(dynamic, 1)
    for (int it = 0; it < B * KV; it++) {
      int b = it / KV, g = it % KV;
      size_t qoff = (size_t)b * T * a.qs + (size_t)g * G * hd, koff = (size_t)b * T * a.ks + (size_t)g * hd;
      for (int j = 0; j < T; j++) {
        memset(dq + qoff + (size_t)j * a.qs, 0, sizeof(float) * (size_t)G * hd);
        memset(dk + koff + (size_t)j * a.ks, 0, sizeof(float) * (size_t)hd);
        memset(dv + koff + (size_t)j * a.ks, 0, sizeof(float) * (size_t)hd);
      }
      for (int r = 0; r < G; r++) {
        size_t ho = qoff + (size_t)r * hd;
        const float *lse_h = lse + ((size_t)b * H + (size_t)g * G + r) * T;
        for (int qt = 0; qt < nt; qt++) {
          int i0 = qt * W, m = T - i0 < W ? T - i0 : W;
          size_t ro = ho + (size_t)i0 * a.qs;
          eng_k_tile_pack_t(t.qT, q + ro, a.qs, m, hd, W);
          eng_k_tile_pack_t(t.doT, dout + ro, a.qs, m, hd, W);
          for (int i = 0; i < W; i++) {
            t.D[i] = i < m ? eng_k_dot_row(dout + ro + (size_t)i * a.qs, out + ro + (size_t)i * a.qs, (size_t)hd) : 0.0f;
            t.L[i] = i < m ? lse_h[i0 + i] : 0.0f;
          }
          for (int kt = 0; kt <= qt; kt++)
            key_tile(&t, &a, dq + ho, dk + koff, dv + koff, q + ro, dout + ro, k + koff, v + koff, qt, kt);
        }
      }
    }
  }
}
