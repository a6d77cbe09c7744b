// One POET-X weight on the cpu: permutations, the forward and backward of
// the chain, the effective weight and the merge's rebasing (poet.h).
#include <string.h>
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "kernels/cpu/gemm.h"
#include "poet/poet.h"

void eng_poet_perm(eng_rng *rng, int n, int32_t *perm) {
  for (int i = 0; i < n; i++) perm[i] = i;
  eng_rng_shuffle_u32(rng, (uint32_t *)perm, (uint64_t)n);
}

size_t eng_poet_layer_work(int d, int ff, int qd, int kvd, int b, int n) {
  const int dims[][2] = {{qd, d}, {kvd, d}, {d, qd}, {ff, d}, {d, ff}}; // out, in
  size_t most = 0;
  for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
    eng_poet_weight w = {.m = dims[i][0], .n = dims[i][1], .b = b};
    size_t f = eng_poet_work(&w, n);
    if (f > most) most = f;
  }
  return most;
}

// yr[j] = xr[p[j]] (add = 1: +=) for j < dim. Gathers are moves and each
// element takes at most one add: the same bits on every path.
static inline void gather_row(float *restrict yr, const float *restrict xr, const int32_t *restrict p, int dim,
                              int add) {
  int j = 0;
#if defined(__AVX512F__)
  for (; j + 16 <= dim; j += 16) {
    __m512 g = _mm512_i32gather_ps(_mm512_loadu_si512((const void *)(p + j)), xr, 4);
    _mm512_storeu_ps(yr + j, add ? _mm512_add_ps(_mm512_loadu_ps(yr + j), g) : g);
  }
#elif defined(__AVX2__)
  for (; j + 8 <= dim; j += 8) {
    __m256 g = _mm256_i32gather_ps(xr, _mm256_loadu_si256((const __m256i *)(p + j)), 4);
    _mm256_storeu_ps(yr + j, add ? _mm256_add_ps(_mm256_loadu_ps(yr + j), g) : g);
  }
#endif
  if (add)
    for (; j < dim; j++) yr[j] += xr[p[j]];
  else
    for (; j < dim; j++) yr[j] = xr[p[j]];
}

void eng_poet_gather(int T, int dim, const int32_t *perm, const float *x, int ldx, float *y, int ldy, int add) {
#pragma omp parallel for schedule(static) if ((size_t)T * dim > 65536)
  for (int t = 0; t < T; t++) gather_row(y + (size_t)t * ldy, x + (size_t)t * ldx, perm, dim, add);
}

// inv[perm[i]] = i over dim values, into at: a scatter by perm is a gather
// by inv, which vectorises (element stores to scattered places ran at half
// the speed).
static const int32_t *inverse(const int32_t *perm, int dim, float *at) {
  int32_t *inv = (int32_t *)at;
  for (int i = 0; i < dim; i++) inv[perm[i]] = i;
  return inv;
}

// The work's parts: two activations of the wider side, the panels, an
// inverse permutation.
static void work_parts(const eng_poet_weight *w, int T, float *work, float **p0, float **p1, float **panels,
                       float **inv) {
  size_t wide = (size_t)(w->n > w->m ? w->n : w->m);
  *p0 = work, *p1 = *p0 + (size_t)T * wide, *panels = *p1 + (size_t)T * wide;
  *inv = *panels + eng_k_bdiag_work((int)wide, w->b);
}

// z [T, m] = (x gathered by pin) · diag(R_in) · W0ᵀ through p0 and p1 ([T, n]
// each); z may be p0.
static void to_z(const eng_poet_weight *w, int T, const float *x, int ldx, float *z, float *p0, float *p1,
                 float *panels) {
  eng_poet_gather(T, w->n, w->pin, x, ldx, p0, w->n, 0);
  eng_k_sgemm_bdiag(T, w->n, w->b, p0, w->n, w->Rin, 0, p1, w->n, panels);
  eng_k_sgemm(0, 1, T, w->m, w->n, p1, w->n, w->W0, w->n, 0.0f, z, w->m);
}

void eng_poet_forward(const eng_poet_weight *w, int T, const float *x, int ldx, float *y, int ldy, float *z,
                      float *work) {
  float *p0, *p1, *panels, *at;
  work_parts(w, T, work, &p0, &p1, &panels, &at);
  float *zz = z ? z : p0;
  to_z(w, T, x, ldx, zz, p0, p1, panels);
  eng_k_sgemm_bdiag(T, w->m, w->b, zz, w->m, w->Rout, 0, p1, w->m, panels);
  eng_poet_gather(T, w->m, w->pout, p1, w->m, y, ldy, 0);
  if (w->bias)
    for (int t = 0; t < T; t++)
      for (int i = 0; i < w->m; i++) y[(size_t)t * ldy + i] += w->bias[i];
}

void eng_poet_backward(const eng_poet_weight *w, int T, const float *x, int ldx, const float *z, const float *dy,
                       int lddy, float *dx, int lddx, int add, float *dRin, float *dRout, float *work) {
  float *p0, *p1, *panels, *at;
  work_parts(w, T, work, &p0, &p1, &panels, &at);
  if (!z) { // the memory mode: z again, from x, into p0
    to_z(w, T, x, ldx, p0, p0, p1, panels);
    z = p0;
  }
  eng_poet_gather(T, w->m, inverse(w->pout, w->m, at), dy, lddy, p1, w->m, 0); // dw: y is w gathered by pout
  eng_k_sgemm_bdiag_grad(T, w->m, w->b, z, w->m, p1, w->m, dRout);
  eng_k_sgemm_bdiag(T, w->m, w->b, p1, w->m, w->Rout, 1, p0, w->m, panels); // dz (over z: done with)
  eng_k_sgemm(0, 0, T, w->n, w->m, p0, w->m, w->W0, w->n, 0.0f, p1, w->n);  // dv = dz · W0
  eng_poet_gather(T, w->n, w->pin, x, ldx, p0, w->n, 0);                              // u
  eng_k_sgemm_bdiag_grad(T, w->n, w->b, p0, w->n, p1, w->n, dRin);
  eng_k_sgemm_bdiag(T, w->n, w->b, p1, w->n, w->Rin, 1, p0, w->n, panels); // du
  eng_poet_gather(T, w->n, inverse(w->pin, w->n, at), p0, w->n, dx, lddx, add);      // dx: u is x gathered by pin
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
