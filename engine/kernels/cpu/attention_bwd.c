// Causal GQA attention backward, FlashAttention-2 style: P is recomputed from
// q, k and the saved lse one tile at a time (the key tiles the forward
// visited, masked as it masked), with D = rowsum(dO∘O):
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
#include <stdalign.h>

// gcc's tuning for recent x86 prefers 256-bit vectors; the tile products run
// twice as many FMAs per cycle at 512 where the -march has them (a no-op
// where it does not).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC target("prefer-vector-width=512")
#endif
#include "kernels/cpu/kmath.h"
#include "kernels/cpu/tile.h"

enum { W = ENG_K_ATT_TILE, JB = ENG_K_TILE_JB, RB = ENG_K_TILE_RB };

// Per-thread buffers of one query tile.
typedef struct bwd_tile {
  alignas(64) float qT[ENG_K_MAX_HD * W], doT[ENG_K_MAX_HD * W]; // packed [hd][query]
  alignas(64) float D[W], L[W];                                  // rowsum(dO∘O), lse
  alignas(64) float pT[W * W], dsT[W * W];                       // [key][query]
  int st[W], lo[W]; // first key of each query's document; in the key tile's numbering
} bwd_tile;

typedef struct bwd_args {
  size_t os, qs, ks, vs; // row strides of out and dout, q and dq, k and dk, v and dv
  int T, hd;
  float scale;
} bwd_args;


// P and dS of the computed part of the tile; masked entries get 0 (what
// attn_p gives a masked score), which the products below rely on. With doc,
// key j is also masked for query i when j < t->lo[i] (before its document):
// a loop of its own, so the tiles without stay as lean as before.
static void p_ds(bwd_tile *t, int n, int diag, int doc, float scale) {
  for (int j = 0; j < n; j++) {
    float *p = t->pT + (size_t)j * W, *ds = t->dsT + (size_t)j * W;
    int i1 = diag ? eng_k_att_diag_first_col(j) : 0;
    if (doc) {
      for (int i = i1; i < W; i++) {
        float pij = (diag && j > i) || j < t->lo[i] ? 0.0f : eng_km_attn_p(p[i], scale, t->L[i]);
        p[i] = pij;
        ds[i] = eng_km_attn_ds(pij, ds[i], t->D[i], scale);
      }
      continue;
    }
    for (int i = i1; i < W; i++) {
      float pij = diag && j > i ? 0.0f : eng_km_attn_p(p[i], scale, t->L[i]);
      p[i] = pij;
      ds[i] = eng_km_attn_ds(pij, ds[i], t->D[i], scale);
    }
  }
}

// D = rowsum(dO∘O) and lse of the m queries of the tile (0 past them). Out
// of line: inlined into the tile loop, gcc leaves the dot products scalar.
static ENG_K_TILE_NOINLINE void query_stats(bwd_tile *t, const float *dout, const float *out, const float *lse,
                                            size_t qs, int m, int hd) {
  for (int i = 0; i < W; i++) {
    t->D[i] = i < m ? eng_k_dot_row(dout + (size_t)i * qs, out + (size_t)i * qs, (size_t)hd) : 0.0f;
    t->L[i] = i < m ? lse[i] : 0.0f;
  }
}

// Adds key tile kt's part of the gradients of query tile qt (packed in t):
// dq points at row 0 of the query head, k, v, dk, dv at row 0 of its kv head,
// q and dout at row i0 of the query tile. On the diagonal tile each product
// leaves out the k range where P or dS is 0 (a query before the key), which
// keeps every chain's bits. acc_q/acc_kv: whether dq/dk,dv rows already hold
// a sum (the first contribution starts from 0 instead, so nothing is zeroed).
static void key_tile(bwd_tile *t, const bwd_args *a, float *dq, float *dk, float *dv, const float *q,
                     const float *dout, const float *k, const float *v, int qt, int kt, int acc_q, int acc_kv) {
  int i0 = qt * W, m = a->T - i0 < W ? a->T - i0 : W;
  int j0 = kt * W, n = a->T - j0 < W ? a->T - j0 : W, diag = qt == kt, hd = a->hd;
  // Only a tile after which some document starts masks by document.
  int doc = t->st[m - 1] > j0;
  for (int i = 0; doc && i < W; i++) t->lo[i] = t->st[i] - j0;
  const float *kj = k + (size_t)j0 * a->ks, *vj = v + (size_t)j0 * a->vs;
  eng_k_att_key_products(t->pT, kj, a->ks, t->qT, n, hd, diag);   // Sᵀ[j][i]
  eng_k_att_key_products(t->dsT, vj, a->vs, t->doT, n, hd, diag); // dPᵀ[j][i]
  p_ds(t, n, diag, doc, a->scale);
  float *dvj = dv + (size_t)j0 * a->vs, *dkj = dk + (size_t)j0 * a->ks;
  // dv[j][c] += Σ_i Pᵀ[j][i]·dO[i][c], then dk[j][c] += Σ_i dSᵀ[j][i]·Q[i][c]
  // (one after the other: dk and dv rows alternating meet 4K aliasing).
  for (int r = 0; r < n; r += RB)
    eng_k_tile_rows(dvj + (size_t)r * a->vs, a->vs, t->pT + (size_t)r * W, W, 1, dout, a->os, n - r < RB ? n - r : RB,
                    diag ? r : 0, m, hd, acc_kv);
  for (int r = 0; r < n; r += RB)
    eng_k_tile_rows(dkj + (size_t)r * a->ks, a->ks, t->dsT + (size_t)r * W, W, 1, q, a->qs, n - r < RB ? n - r : RB,
                    diag ? r : 0, m, hd, acc_kv);
  // dq[i][c] += Σ_j dSᵀ[j][i]·K[j][c]
  float *dqi = dq + (size_t)i0 * a->qs;
  for (int r = 0; r < m; r += RB) {
    int nq = m - r < RB ? m - r : RB, k1 = diag && r + RB < n ? r + RB : n;
    eng_k_tile_rows(dqi + (size_t)r * a->qs, a->qs, t->dsT + r, 1, W, kj, a->ks, nq, 0, k1, hd, acc_q);
  }
}

void eng_k_attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse,
                         const float *q, int ldq, const float *k, int ldk, const float *v, int ldv,
                         const int32_t *pos, int B, int T, int H, int KV, int hd, int window) {
  if (B <= 0 || T <= 0) return;
  const int G = H / KV, nt = (T + W - 1) / W;
  const bwd_args a = {(size_t)H * hd, (size_t)ldq, (size_t)ldk, (size_t)ldv, T, hd, 1.0f / sqrtf((float)hd)};
#pragma omp parallel if ((size_t)B * H * T * hd >= ENG_K_PAR_MIN)
  {
    bwd_tile t;
#pragma omp for schedule(dynamic, 1)
    for (int it = 0; it < B * KV; it++) {
      int b = it / KV, g = it % KV;
      size_t qoff = (size_t)b * T * a.qs + (size_t)g * G * hd, ooff = (size_t)b * T * a.os + (size_t)g * G * hd;
      size_t koff = (size_t)b * T * a.ks + (size_t)g * hd, voff = (size_t)b * T * a.vs + (size_t)g * hd;
      for (int r = 0; r < G; r++) {
        size_t ho = qoff + (size_t)r * hd, hoo = ooff + (size_t)r * hd;
        const float *lse_h = lse + ((size_t)b * H + (size_t)g * G + r) * T;
        for (int qt = 0; qt < nt; qt++) {
          int i0 = qt * W, m = T - i0 < W ? T - i0 : W;
          size_t ro = ho + (size_t)i0 * a.qs, roo = hoo + (size_t)i0 * a.os;
          eng_k_tile_pack_t(t.qT, q + ro, a.qs, m, hd, W);
          eng_k_tile_pack_t(t.doT, dout + roo, a.os, m, hd, W);
          query_stats(&t, dout + roo, out + roo, lse_h + i0, a.os, m, hd);
          eng_k_att_doc_starts(t.st, pos ? pos + (size_t)b * T : NULL, i0, m, window);
          // Key tiles wholly before the earliest visible key are skipped.
          // dq rows first meet the first key tile left; dk/dv rows of tile kt
          // first meet the first query head's diagonal tile (no query tile
          // before it sees them, and a diagonal tile is never skipped).
          const int kt0 = t.st[0] / W;
          for (int kt = kt0; kt <= qt; kt++)
            key_tile(&t, &a, dq + ho, dk + koff, dv + voff, q + ro, dout + roo, k + koff, v + voff, qt, kt, kt > kt0,
                     r > 0 || kt < qt);
        }
      }
    }
  }
}
