// One POET-X weight on the cpu: block rotations, permutations, the forward
// and backward of the chain, the effective weight and the merge's rebasing
// (poet.h).
#include <string.h>
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "kernels/cpu/gemm.h"
#include "poet/poet.h"

// Blocks go to the threads whole: a block's product is small, and a team per
// product (the nested ones run on one thread) would mostly wait. The bits do
// not depend on it (gemm.h: a row's result depends on its inputs alone).
void eng_poet_rotate(int T, int dim, int b, const float *x, int ldx, const float *R, int trans, float *y, int ldy) {
#pragma omp parallel for schedule(static)
  for (int k = 0; k < dim / b; k++)
    eng_k_sgemm(0, trans, T, b, b, x + (size_t)k * b, ldx, R + (size_t)k * b * b, b, 0.0f, y + (size_t)k * b, ldy);
}

void eng_poet_rotate_dR(int T, int dim, int b, const float *x, int ldx, const float *dy, int ldy, float *dR) {
#pragma omp parallel for schedule(static)
  for (int k = 0; k < dim / b; k++)
    eng_k_sgemm(1, 0, b, b, T, x + (size_t)k * b, ldx, dy + (size_t)k * b, ldy, 1.0f, dR + (size_t)k * b * b, b);
}

void eng_poet_gather(int T, int dim, const int32_t *perm, const float *x, int ldx, float *y, int ldy) {
#pragma omp parallel for schedule(static) if ((size_t)T * dim > 65536)
  for (int t = 0; t < T; t++) {
    const float *restrict xr = x + (size_t)t * ldx; // y never overlaps x: the gather vectorises
    float *restrict yr = y + (size_t)t * ldy;
    const int32_t *restrict p = perm;
    int j = 0;
    // Gathers are moves: the same bits on every path.
#if defined(__AVX512F__)
    for (; j + 16 <= dim; j += 16)
      _mm512_storeu_ps(yr + j, _mm512_i32gather_ps(_mm512_loadu_si512((const void *)(p + j)), xr, 4));
#elif defined(__AVX2__)
    for (; j + 8 <= dim; j += 8)
      _mm256_storeu_ps(yr + j, _mm256_i32gather_ps(xr, _mm256_loadu_si256((const __m256i *)(p + j)), 4));
#endif
    for (; j < dim; j++) yr[j] = xr[p[j]];
  }
}

void eng_poet_scatter(int T, int dim, const int32_t *perm, const float *y, int ldy, float *x, int ldx, int add) {
#pragma omp parallel for schedule(static) if ((size_t)T * dim > 65536)
  for (int t = 0; t < T; t++) {
    const float *yr = y + (size_t)t * ldy;
    float *xr = x + (size_t)t * ldx;
    if (add)
      for (int j = 0; j < dim; j++) xr[perm[j]] += yr[j];
    else
      for (int j = 0; j < dim; j++) xr[perm[j]] = yr[j];
  }
}

void eng_poet_perm(eng_rng *rng, int n, int32_t *perm) {
  for (int i = 0; i < n; i++) perm[i] = i;
  eng_rng_shuffle_u32(rng, (uint32_t *)perm, (uint64_t)n);
}

size_t eng_poet_layer_work(int d, int ff, int qd, int kvd, int n) {
  const int dims[][2] = {{qd, d}, {kvd, d}, {d, qd}, {ff, d}, {d, ff}}; // out, in
  size_t most = 0;
  for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
    eng_poet_weight w = {.m = dims[i][0], .n = dims[i][1]};
    size_t f = eng_poet_fwd_work(&w, n), b = eng_poet_bwd_work(&w, n);
    if (f > most) most = f;
    if (b > most) most = b;
  }
  return most;
}

// z [T, m] = (x gathered by pin) · diag(R_in) · W0ᵀ; u, v: [T, n] each.
static void to_z(const eng_poet_weight *w, int T, const float *x, int ldx, float *z, float *u, float *v) {
  eng_poet_gather(T, w->n, w->pin, x, ldx, u, w->n);
  eng_poet_rotate(T, w->n, w->b, u, w->n, w->Rin, 0, v, w->n);
  eng_k_sgemm(0, 1, T, w->m, w->n, v, w->n, w->W0, w->n, 0.0f, z, w->m);
}

void eng_poet_forward(const eng_poet_weight *w, int T, const float *x, int ldx, float *y, int ldy, float *z,
                      float *work) {
  int wide = w->n > w->m ? w->n : w->m;
  float *u = work, *v = u + (size_t)T * w->n, *zz = z ? z : v + (size_t)T * wide;
  to_z(w, T, x, ldx, zz, u, v);
  float *rot = v; // v is done with; it has room for [T, m]
  eng_poet_rotate(T, w->m, w->b, zz, w->m, w->Rout, 0, rot, w->m);
  eng_poet_gather(T, w->m, w->pout, rot, w->m, y, ldy);
  if (w->bias)
    for (int t = 0; t < T; t++)
      for (int i = 0; i < w->m; i++) y[(size_t)t * ldy + i] += w->bias[i];
}

void eng_poet_backward(const eng_poet_weight *w, int T, const float *x, int ldx, const float *z, const float *dy,
                       int lddy, float *dx, int lddx, int add, float *dRin, float *dRout, float *work) {
  size_t tn = (size_t)T * w->n, tm = (size_t)T * w->m;
  float *u = work, *nb = u + tn, *dw = nb + tn, *mb = dw + tm;
  // y = w gathered by pout: dw is dy scattered back.
  eng_poet_scatter(T, w->m, w->pout, dy, lddy, dw, w->m, 0);
  if (!z) { // the memory mode: z again, from x (u stays for dR_in)
    to_z(w, T, x, ldx, mb, u, nb);
    z = mb;
  } else {
    eng_poet_gather(T, w->n, w->pin, x, ldx, u, w->n);
  }
  eng_poet_rotate_dR(T, w->m, w->b, z, w->m, dw, w->m, dRout);
  eng_poet_rotate(T, w->m, w->b, dw, w->m, w->Rout, 1, mb, w->m);                  // dz
  eng_k_sgemm(0, 0, T, w->n, w->m, mb, w->m, w->W0, w->n, 0.0f, nb, w->n);         // dv = dz · W0
  eng_poet_rotate_dR(T, w->n, w->b, u, w->n, nb, w->n, dRin);
  eng_poet_rotate(T, w->n, w->b, nb, w->n, w->Rin, 1, u, w->n);                    // du
  eng_poet_scatter(T, w->n, w->pin, u, w->n, dx, lddx, add);
}

void eng_poet_effective(const eng_poet_weight *w, float *W, float *work) {
  memcpy(W, w->W0, (size_t)w->m * w->n * sizeof *W);
  eng_poet_effective_here(w->m, w->n, w->b, W, w->pin, w->pout, w->Rin, w->Rout, work);
}

void eng_poet_rebase(int m, int n, const float *W, const int32_t *pin, const int32_t *pout, float *W0) {
  for (int i = 0; i < m; i++) {
    const float *src = W + (size_t)i * n;
    float *dst = W0 + (size_t)pout[i] * n;
    for (int c = 0; c < n; c++) dst[c] = src[pin[c]];
  }
}
