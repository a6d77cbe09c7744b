// Causal GQA attention forward, FlashAttention style: one query tile at a time
// against the key tiles up to the diagonal (from the first that holds a key
// it sees: of its documents when sequences are packed, inside its window
// when attention slides), with a running max and sum per
// query (online softmax), so memory is O(tile·hd) and no T×T matrix exists.
// Everything is held transposed (Qᵀ, Sᵀ = K·Qᵀ, Oᵀ) so that the SIMD dimension
// is the query index: the softmax statistics of 64 queries then update as
// plain vectors and the head dim can be anything.
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


// Scales and masks the scores (as transformers does, after the dot), folds
// them into the running max mn and turns them into weights p = osm_p(s, mn)
// with their column sums; masked entries get p = 0, exactly what osm_p gives
// a masked -inf, so they may as well be skipped. lo (NULL: none) masks key j
// for query i when j < lo[i] too: keys before the query's document. A query
// with no key left in the tile and none before keeps mn = -inf; its weights
// are taken against 0 instead (all 0, where -inf - -inf would be NaN).
static void softmax_tile(float *restrict sT, int n, int diag, const int *restrict lo, float scale,
                         float *restrict mn, float *restrict rowsum) {
  for (int j = 0; j < n; j++) {
    float *s = sT + (size_t)j * W;
    for (int i = diag ? eng_k_att_diag_first_col(j) : 0; i < W; i++) {
      float x = (diag && j > i) || (lo && j < lo[i]) ? -INFINITY : s[i] * scale;
      s[i] = x;
      mn[i] = eng_km_osm_max(mn[i], x);
    }
  }
  float m0[W];
  for (int i = 0; i < W; i++) m0[i] = mn[i] == -INFINITY ? 0.0f : mn[i], rowsum[i] = 0.0f;
  for (int j = 0; j < n; j++) {
    float *s = sT + (size_t)j * W;
    for (int i = diag ? eng_k_att_diag_first_col(j) : 0; i < W; i++) {
      s[i] = eng_km_osm_p(s[i], m0[i]);
      rowsum[i] += s[i];
    }
  }
}

// oT[c][i] (= or += by acc) Σ_j v_j[c] · p[j][i]; on the diagonal tile the
// keys after a 32-query block's last query have p = 0 and are left out.
static void add_pv(float *oT, const float *vj, size_t ks, const float *pT, int n, int hd, int diag, int acc) {
  for (int ib = 0; ib < W; ib += JB) {
    int k1 = diag && ib + JB < n ? ib + JB : n;
    for (int r = 0; r < hd; r += RB)
      eng_k_tile_block_k(oT + (size_t)r * W + ib, W, vj + r, 1, ks, pT + ib, W, hd - r < RB ? hd - r : RB, 0, k1,
                         acc);
  }
}

// One (batch, head, query tile): out rows i0..i0+m, lse of those rows.
// Rows of out, q, k and v are os, qs, ks and vs floats apart; pos is the
// row's position ids (NULL: one document).
static void query_tile(float *out, float *lse, const float *q, const float *k, const float *v, const int32_t *pos,
                       int qt, int T, size_t os, size_t qs, size_t ks, size_t vs, int hd, float scale, int window) {
  alignas(64) float qT[ENG_K_MAX_HD * W], oT[ENG_K_MAX_HD * W], sT[W * W];
  alignas(64) float mx[W], l[W], mn[W], alpha[W], rowsum[W];
  int st[W], lo[W];
  int i0 = qt * W, m = T - i0 < W ? T - i0 : W;
  eng_k_tile_pack_t(qT, q + (size_t)i0 * qs, qs, m, hd, W);
  eng_k_att_doc_starts(st, pos, i0, m, window);
  for (int i = 0; i < W; i++) mx[i] = -INFINITY, l[i] = 0.0f;
  // Key tiles wholly before the earliest document start are skipped.
  const int t0 = st[0] / W;
  for (int t = t0; t <= qt; t++) {
    int j0 = t * W, n = T - j0 < W ? T - j0 : W, diag = t == qt;
    // Only a tile after which some document starts masks by document.
    int doc = st[m - 1] > j0;
    for (int i = 0; doc && i < W; i++) lo[i] = st[i] - j0;
    eng_k_att_key_products(sT, k + (size_t)j0 * ks, ks, qT, n, hd, diag); // Sᵀ[j][i] = k_j · q_i
    for (int i = 0; i < W; i++) mn[i] = mx[i];
    softmax_tile(sT, n, diag, doc ? lo : NULL, scale, mn, rowsum);
    for (int i = 0; i < W; i++) {
      // A query with no key so far has nothing to rescale (l and its oT are 0).
      alpha[i] = mn[i] == -INFINITY ? 0.0f : eng_km_osm_alpha(mx[i], mn[i]);
      l[i] = eng_km_osm_sum(l[i], alpha[i], rowsum[i]), mx[i] = mn[i];
    }
    // The first tile's alpha is 0 and oT empty: its product starts from 0.
    if (t > t0)
      for (int c = 0; c < hd; c++)
        for (int i = 0; i < W; i++) oT[(size_t)c * W + i] *= alpha[i];
    add_pv(oT, v + (size_t)j0 * vs, vs, sT, n, hd, diag, t > t0);
  }
  for (int c = 0; c < hd; c++)
    for (int i = 0; i < W; i++) oT[(size_t)c * W + i] /= l[i];
  for (int i = 0; i < m; i++) {
    float *o = out + (size_t)(i0 + i) * os;
    for (int c = 0; c < hd; c++) o[c] = oT[(size_t)c * W + i];
    lse[i0 + i] = eng_km_osm_lse(mx[i], l[i]);
  }
}

void eng_k_attention_fwd(float *out, float *lse, const float *q, int ldq, const float *k, int ldk, const float *v,
                         int ldv, const int32_t *pos, int B, int T, int H, int KV, int hd, int window) {
  if (B <= 0 || T <= 0) return;
  const int G = H / KV, nt = (T + W - 1) / W, items = B * H * nt;
  const float scale = 1.0f / sqrtf((float)hd);
  const size_t os = (size_t)H * hd, qs = (size_t)ldq, ks = (size_t)ldk, vs = (size_t)ldv;
  // Each item writes its own rows, so the schedule cannot change a result;
  // dynamic with the longest tiles first balances the causal triangle.
#pragma omp parallel for schedule(dynamic, 1) if ((size_t)B * H * T * hd >= ENG_K_PAR_MIN)
  for (int it = 0; it < items; it++) {
    int qt = nt - 1 - it % nt, bh = it / nt, b = bh / H, h = bh % H;
    size_t boff = (size_t)b * T;
    query_tile(out + boff * os + (size_t)h * hd, lse + ((size_t)b * H + h) * T, q + boff * qs + (size_t)h * hd,
               k + boff * ks + (size_t)(h / G) * hd, v + boff * vs + (size_t)(h / G) * hd, pos ? pos + boff : NULL,
               qt, T, os, qs, ks, vs, hd, scale, window);
  }
}
