// POET-X's cuda kernels (kernels_cuda.h's POET-X section) against poet.h's
// math restated in double: the Cayley–Neumann map as the plain polynomial
// I + 2Q + 2Q² + 2Q³ + Q⁴, its backward as the sum Σ c_s Σ A^p·G·A^q (not
// cayley.c's nested form), the rotations, permutations and one weight's
// chain as loops. The references are written here rather than calling
// engine/poet because the engine-only GPU build without OpenBLAS has no
// engine/poet (its products go through eng_k_sgemm, whose blas route needs
// OpenBLAS); the cpu tests (tests/parity/test_poet_linear.c) hold the cpu
// functions to the same math.
//
// Shapes: a non-square weight (48×32) with blocks of 8 and of 16, T = 5
// rows, θ uniform in ±0.05 (R near I, as in training, yet a transposed
// or misplaced block still moves results by ~0.1). Rows carry padding (ld =
// dim + 4), which outputs must leave alone.
//
// Tolerances: fp32 results are compared as max|got − ref| / max|ref| ≤ 1e-4
// (FP32_TOL). The GPU sums products of at most 48 terms in fp32 in another
// order than the double reference, through chains of at most five products
// of near-orthogonal factors, which gives errors of a few 48·2^-24 ≈ 3e-6
// of the largest value; 1e-4 leaves a margin of ~30 for cuBLASLt's choice of
// summation order while any wrong block, transpose or index (≥ 1e-2 here)
// fails. Moves (gather, scatter) and the scatter's single fp32 add are
// exact, as are the two modes of the chain against each other (the same
// products on the same shapes and alignments: kernels_cuda.h).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef TRAIND_HAVE_CUDA
int main(void) {
  fprintf(stderr, "test_gpu_poet: SKIP: this build has no CUDA backend\n");
  return 77;
}
#else

#include "gpu_test.h"

#define FP32_TOL 1e-4
#define PAD 4             // floats of padding after each row
#define SENTINEL 7777.0f  // what padding holds, and must still hold

static eng_err err;
static cudaStream_t st;
static eng_cuda_ctx *cx;

#define K_OK(call) CHECK_OK(call, &err)

static size_t tri(int b) { return (size_t)b * (b - 1) / 2; }

// ---- host data ----------------------------------------------------------------------

static double *dzeros(size_t n) {
  double *p = calloc(n + 1, sizeof *p);
  CHECK(p, "out of memory");
  return p;
}

static float *fill(size_t n, float v) {
  float *p = malloc((n + 1) * sizeof *p);
  CHECK(p, "out of memory");
  for (size_t i = 0; i < n; i++) p[i] = v;
  return p;
}

// T rows of dim random values, ld = dim + PAD apart, padding SENTINEL.
static float *rows_rand(int T, int dim, float scale) {
  int ld = dim + PAD;
  float *p = fill((size_t)T * ld, SENTINEL);
  for (int t = 0; t < T; t++)
    for (int j = 0; j < dim; j++) p[(size_t)t * ld + j] = scale * gpu_frand();
  return p;
}

// The dim values of each row, packed.
static float *unpad(const float *a, int T, int dim, int ld) {
  float *p = malloc(((size_t)T * dim + 1) * sizeof *p);
  CHECK(p, "out of memory");
  for (int t = 0; t < T; t++) memcpy(p + (size_t)t * dim, a + (size_t)t * ld, (size_t)dim * sizeof *p);
  return p;
}

static void expect_pad(const char *what, const float *a, int T, int dim, int ld) {
  for (int t = 0; t < T; t++)
    for (int j = dim; j < ld; j++)
      CHECK(a[(size_t)t * ld + j] == SENTINEL, "%s: padding of row %d, column %d was written (%g)", what, t, j,
            a[(size_t)t * ld + j]);
}

// Compares the packed rows of a padded device result with ref [T, dim] and
// checks its padding.
static void rows_rel_err(const char *what, const float *dev, int T, int dim, const double *ref) {
  int ld = dim + PAD;
  float *g = dev_f32_to_host(dev, (size_t)T * ld);
  expect_pad(what, g, T, dim, ld);
  float *p = unpad(g, T, dim, ld);
  rel_err(what, p, ref, (size_t)T * dim, FP32_TOL);
  free(g), free(p);
}

static int32_t *perm_rand(int n) {
  int32_t *p = malloc(((size_t)n + 1) * sizeof *p);
  CHECK(p, "out of memory");
  for (int i = 0; i < n; i++) p[i] = i;
  for (int i = n - 1; i > 0; i--) {
    int j = gpu_irand(i + 1), t = p[i];
    p[i] = p[j], p[j] = t;
  }
  return p;
}

// ---- references in double -------------------------------------------------------------

// C = A·B for b×b matrices.
static void mm(int b, const double *A, const double *B, double *C) {
  for (int i = 0; i < b; i++)
    for (int j = 0; j < b; j++) {
      double s = 0;
      for (int l = 0; l < b; l++) s += A[i * b + l] * B[l * b + j];
      C[i * b + j] = s;
    }
}

// Q's powers 0..4 (P[p] = Q^p) from one block's θ.
static void skew_powers(int b, const float *theta, double *P[5]) {
  size_t bb = (size_t)b * b, t = 0;
  memset(P[0], 0, bb * sizeof(double));
  memset(P[1], 0, bb * sizeof(double));
  for (int i = 0; i < b; i++) {
    P[0][i * b + i] = 1;
    for (int j = i + 1; j < b; j++, t++) P[1][i * b + j] = theta[t], P[1][j * b + i] = -(double)theta[t];
  }
  for (int p = 2; p <= 4; p++) mm(b, P[p - 1], P[1], P[p]);
}

static double **powers_alloc(int b) {
  double **P = malloc(5 * sizeof *P);
  CHECK(P, "out of memory");
  for (int p = 0; p < 5; p++) P[p] = dzeros((size_t)b * b);
  return P;
}

static void powers_free(double **P) {
  for (int p = 0; p < 5; p++) free(P[p]);
  free(P);
}

// R = I + 2Q + 2Q² + 2Q³ + Q⁴, per block.
static void ref_cayley(int nblk, int b, const float *theta, double *R) {
  size_t bb = (size_t)b * b;
  double **P = powers_alloc(b);
  const double c[5] = {1, 2, 2, 2, 1};
  for (int k = 0; k < nblk; k++) {
    skew_powers(b, theta + k * tri(b), P);
    for (size_t i = 0; i < bb; i++) {
      double s = 0;
      for (int p = 0; p < 5; p++) s += c[p] * P[p][i];
      R[k * bb + i] = s;
    }
  }
  powers_free(P);
}

// dθ += dL/dθ: with A = Qᵀ, dL/dQ = Σ_{s=1..4} c_s Σ_{p+q=s−1} A^p·G·A^q
// (d(Q^s) = Σ Q^p·dQ·Q^q), and θ_ij enters Q_ij and −Q_ji.
static void ref_cayley_bwd(int nblk, int b, const float *theta, const float *dR, double *dtheta) {
  size_t bb = (size_t)b * b;
  double **P = powers_alloc(b), **A = powers_alloc(b);
  double *G = dzeros(bb), *t1 = dzeros(bb), *t2 = dzeros(bb), *dQ = dzeros(bb);
  const double c[5] = {0, 2, 2, 2, 1};
  for (int k = 0; k < nblk; k++) {
    skew_powers(b, theta + k * tri(b), P);
    for (int p = 0; p < 4; p++)
      for (int i = 0; i < b; i++)
        for (int j = 0; j < b; j++) A[p][i * b + j] = P[p][j * b + i];
    for (size_t i = 0; i < bb; i++) G[i] = dR[k * bb + i], dQ[i] = 0;
    for (int s = 1; s <= 4; s++)
      for (int p = 0; p < s; p++) {
        mm(b, A[p], G, t1);
        mm(b, t1, A[s - 1 - p], t2);
        for (size_t i = 0; i < bb; i++) dQ[i] += c[s] * t2[i];
      }
    size_t t = 0;
    for (int i = 0; i < b; i++)
      for (int j = i + 1; j < b; j++, t++) dtheta[k * tri(b) + t] += dQ[i * b + j] - dQ[j * b + i];
  }
  powers_free(P), powers_free(A);
  free(G), free(t1), free(t2), free(dQ);
}

// max over blocks of ‖RᵀR − I‖_F (poet.h's eng_poet_orth_err), in double.
static double orth_err(int nblk, int b, const double *R) {
  double worst = 0;
  for (int k = 0; k < nblk; k++) {
    const double *r = R + (size_t)k * b * b;
    double sum = 0;
    for (int i = 0; i < b; i++)
      for (int j = 0; j < b; j++) {
        double d = i == j ? -1.0 : 0.0;
        for (int l = 0; l < b; l++) d += r[l * b + i] * r[l * b + j];
        sum += d * d;
      }
    if (sqrt(sum) > worst) worst = sqrt(sum);
  }
  return worst;
}

// y[t, kb + c] = Σ_r x[t, kb + r]·R[k][r][c] (trans: R[k][c][r]); x rows
// ldx apart, y packed [T, dim].
static void ref_rotate(int T, int dim, int b, const double *x, int ldx, const float *R, int trans, double *y) {
  for (int t = 0; t < T; t++)
    for (int k = 0; k < dim / b; k++) {
      const float *r = R + (size_t)k * b * b;
      for (int c = 0; c < b; c++) {
        double s = 0;
        for (int l = 0; l < b; l++) s += x[(size_t)t * ldx + k * b + l] * (trans ? r[c * b + l] : r[l * b + c]);
        y[(size_t)t * dim + k * b + c] = s;
      }
    }
}

// dR[k][r][c] += Σ_t x[t, kb + r]·dy[t, kb + c]; x and dy packed.
static void ref_rotate_dR(int T, int dim, int b, const double *x, const double *dy, double *dR) {
  for (int k = 0; k < dim / b; k++)
    for (int r = 0; r < b; r++)
      for (int c = 0; c < b; c++) {
        double s = 0;
        for (int t = 0; t < T; t++) s += x[(size_t)t * dim + k * b + r] * dy[(size_t)t * dim + k * b + c];
        dR[((size_t)k * b + r) * b + c] += s;
      }
}

static double *widen_rows(const float *a, int T, int dim, int ld) {
  double *d = dzeros((size_t)T * dim);
  for (int t = 0; t < T; t++)
    for (int j = 0; j < dim; j++) d[(size_t)t * dim + j] = a[(size_t)t * ld + j];
  return d;
}

// ---- one weight, on both sides ----------------------------------------------------------

typedef struct host_weight {
  int m, n, b;
  float *W0, *bias;       // the values of the bf16 W0 and bias (bias NULL: none)
  int32_t *pin, *pout;
  float *Rin, *Rout;      // the GPU's own rotations, downloaded
  double *W0d;
} host_weight;

// The forward's references: z and y [T, m], and u [T, n] for the backward.
static void ref_forward(const host_weight *w, int T, const float *x, double *u, double *z, double *y) {
  int m = w->m, n = w->n, ldx = n + PAD;
  double *v = dzeros((size_t)T * n), *rot = dzeros((size_t)T * m);
  for (int t = 0; t < T; t++)
    for (int j = 0; j < n; j++) u[(size_t)t * n + j] = x[(size_t)t * ldx + w->pin[j]];
  ref_rotate(T, n, w->b, u, n, w->Rin, 0, v);
  for (int t = 0; t < T; t++)
    for (int i = 0; i < m; i++) {
      double s = 0;
      for (int c = 0; c < n; c++) s += v[(size_t)t * n + c] * w->W0d[(size_t)i * n + c];
      z[(size_t)t * m + i] = s;
    }
  ref_rotate(T, m, w->b, z, m, w->Rout, 0, rot);
  for (int t = 0; t < T; t++)
    for (int i = 0; i < m; i++)
      y[(size_t)t * m + i] = rot[(size_t)t * m + w->pout[i]] + (w->bias ? w->bias[i] : 0.0);
  free(v), free(rot);
}

// The backward's references: dx [T, n] (+= dx0 packed, which may be NULL),
// dRin and dRout (+=), from dy (rows m + PAD apart) and the forward's u, z.
static void ref_backward(const host_weight *w, int T, const double *u, const double *z, const float *dy,
                         double *dx, double *dRin, double *dRout) {
  int m = w->m, n = w->n, lddy = m + PAD;
  double *dw = dzeros((size_t)T * m), *dz = dzeros((size_t)T * m), *dv = dzeros((size_t)T * n);
  double *du = dzeros((size_t)T * n);
  for (int t = 0; t < T; t++)
    for (int i = 0; i < m; i++) dw[(size_t)t * m + w->pout[i]] = dy[(size_t)t * lddy + i];
  ref_rotate_dR(T, m, w->b, z, dw, dRout);
  ref_rotate(T, m, w->b, dw, m, w->Rout, 1, dz);
  for (int t = 0; t < T; t++)
    for (int c = 0; c < n; c++) {
      double s = 0;
      for (int i = 0; i < m; i++) s += dz[(size_t)t * m + i] * w->W0d[(size_t)i * n + c];
      dv[(size_t)t * n + c] = s;
    }
  ref_rotate_dR(T, n, w->b, u, dv, dRin);
  ref_rotate(T, n, w->b, dv, n, w->Rin, 1, du);
  for (int t = 0; t < T; t++)
    for (int j = 0; j < n; j++) dx[(size_t)t * n + w->pin[j]] += du[(size_t)t * n + j];
  free(dw), free(dz), free(dv), free(du);
}

// ---- the checks -------------------------------------------------------------------------

// θ → R for nblk blocks on the GPU, against the reference; returns the
// device R and its values in *host.
static float *check_cayley(const char *side, int nblk, int b, const float *theta, float **host) {
  size_t n = (size_t)nblk * b * b;
  float *dth = dev_from(theta, nblk * tri(b) * sizeof(float)), *dR = dev_alloc(n * sizeof(float));
  void *work = dev_alloc(eng_cuda_poet_cayley_work_bytes(nblk, b));
  K_OK(eng_cuda_poet_cayley(cx, nblk, b, dth, dR, work, &err));
  double *ref = dzeros(n);
  ref_cayley(nblk, b, theta, ref);
  float *g = dev_f32_to_host(dR, n);
  char what[64];
  snprintf(what, sizeof what, "cayley R_%s", side);
  rel_err(what, g, ref, n, FP32_TOL);
  // The GPU's R is as orthogonal as the three-term series allows: its error
  // is the exact polynomial's (O(‖Q‖⁴): 1e-4 to 1e-2 here) up to the fp32
  // rounding of values near I, which moves ‖RᵀR − I‖_F by less than b·2^-21.
  double *gd = dzeros(n); // the GPU's values, exactly
  for (size_t i = 0; i < n; i++) gd[i] = g[i];
  double og = orth_err(nblk, b, gd), orf = orth_err(nblk, b, ref), otol = b * 2.0 / (1 << 21);
  free(gd);
  printf("  %-34s %.3e (exact polynomial %.3e, tol ±%.1e)\n", "orthogonality ‖RᵀR − I‖_F", og, orf, otol);
  CHECK(fabs(og - orf) <= otol, "R_%s: orthogonality error %.6e, the exact polynomial's %.6e", side, og, orf);
  cudaFree(dth), cudaFree(work), free(ref);
  *host = g;
  return dR;
}

// dθ += from a random dL/dR over a random dθ.
static void check_cayley_bwd(int nblk, int b, const float *theta) {
  size_t n = (size_t)nblk * b * b, nt = nblk * tri(b);
  float *G = frand_n(n, 1.0f), *dth0 = frand_n(nt, 1.0f);
  float *dth = dev_from(theta, nt * sizeof(float)), *dG = dev_from(G, n * sizeof(float));
  float *dD = dev_from(dth0, nt * sizeof(float));
  void *work = dev_alloc(eng_cuda_poet_cayley_bwd_work_bytes(nblk, b));
  K_OK(eng_cuda_poet_cayley_bwd(cx, nblk, b, dth, dG, dD, work, &err));
  double *ref = to_double(dth0, nt);
  ref_cayley_bwd(nblk, b, theta, G, ref);
  float *g = dev_f32_to_host(dD, nt);
  rel_err("cayley_bwd dθ +=", g, ref, nt, FP32_TOL);
  cudaFree(dth), cudaFree(dG), cudaFree(dD), cudaFree(work);
  free(G), free(dth0), free(ref), free(g);
}

// rotate (both transposes) and rotate_dR over dim values with the GPU's R.
static void check_rotate(int T, int dim, int b, const float *dR, const float *R) {
  int ld = dim + PAD;
  size_t nr = (size_t)T * ld, nb = (size_t)dim * b;
  float *x = rows_rand(T, dim, 1.0f), *dy = rows_rand(T, dim, 1.0f), *pad = fill(nr, SENTINEL);
  float *dX = dev_from(x, nr * 4), *dDY = dev_from(dy, nr * 4), *dY = dev_alloc(nr * 4);
  double *xd = widen_rows(x, T, dim, ld), *dyd = widen_rows(dy, T, dim, ld), *ref = dzeros((size_t)T * dim);
  for (int trans = 0; trans < 2; trans++) {
    to_dev(dY, pad, nr * 4);
    K_OK(eng_cuda_poet_rotate(cx, T, dim, b, dX, ld, dR, trans, dY, ld, &err));
    ref_rotate(T, dim, b, xd, dim, R, trans, ref);
    rows_rel_err(trans ? "rotate y = x·diag(R)ᵀ" : "rotate y = x·diag(R)", dY, T, dim, ref);
  }
  float *dR0 = frand_n(nb, 1.0f);
  float *dDR = dev_from(dR0, nb * 4);
  K_OK(eng_cuda_poet_rotate_dR(cx, T, dim, b, dX, ld, dDY, ld, dDR, &err));
  double *rdr = to_double(dR0, nb);
  ref_rotate_dR(T, dim, b, xd, dyd, rdr);
  float *g = dev_f32_to_host(dDR, nb);
  rel_err("rotate_dR dR += xᵀ·dy", g, rdr, nb, FP32_TOL);
  cudaFree(dX), cudaFree(dDY), cudaFree(dY), cudaFree(dDR);
  free(x), free(dy), free(pad), free(xd), free(dyd), free(ref), free(dR0), free(rdr), free(g);
}

// gather and scatter (= and +=) over dim values: moves and one fp32 add,
// exact.
static void check_perm(int T, int dim, const int32_t *perm, const int32_t *dperm) {
  int ld = dim + PAD;
  size_t nr = (size_t)T * ld;
  float *x = rows_rand(T, dim, 1.0f), *x0 = rows_rand(T, dim, 1.0f), *pad = fill(nr, SENTINEL);
  float *dX = dev_from(x, nr * 4), *dY = dev_from(pad, nr * 4);
  K_OK(eng_cuda_poet_gather(T, dim, dperm, dX, ld, dY, ld, st, &err));
  float *y = dev_f32_to_host(dY, nr);
  expect_pad("gather", y, T, dim, ld);
  for (int t = 0; t < T; t++)
    for (int j = 0; j < dim; j++)
      CHECK(y[(size_t)t * ld + j] == x[(size_t)t * ld + perm[j]], "gather: row %d, column %d", t, j);
  printf("  %-34s exact\n", "gather");
  for (int add = 0; add < 2; add++) {
    float *dXs = dev_from(x0, nr * 4);
    K_OK(eng_cuda_poet_scatter(T, dim, dperm, dY, ld, dXs, ld, add, st, &err));
    float *g = dev_f32_to_host(dXs, nr);
    expect_pad("scatter", g, T, dim, ld);
    for (int t = 0; t < T; t++)
      for (int j = 0; j < dim; j++) {
        size_t d = (size_t)t * ld + perm[j];
        float want = add ? x0[d] + y[(size_t)t * ld + j] : y[(size_t)t * ld + j];
        CHECK(g[d] == want, "scatter (add %d): row %d, column %d is %.9g, want %.9g", add, t, perm[j], g[d], want);
      }
    printf("  %-34s exact\n", add ? "scatter +=" : "scatter =");
    cudaFree(dXs), free(g);
  }
  cudaFree(dX), cudaFree(dY), free(x), free(x0), free(pad), free(y);
}

static void expect_same(const char *what, const float *dev_a, const float *dev_b, size_t n) {
  float *a = dev_f32_to_host(dev_a, n), *b = dev_f32_to_host(dev_b, n);
  CHECK(memcmp(a, b, n * sizeof *a) == 0, "%s: the fast and the memory mode differ", what);
  printf("  %-34s exact\n", what);
  free(a), free(b);
}

// One weight's forward and backward, both modes, against the reference.
static void check_chain(host_weight *w, const eng_cuda_poet_weight *dw, int T) {
  int m = w->m, n = w->n, ldx = n + PAD, ldy = m + PAD;
  size_t nx = (size_t)T * ldx, ny = (size_t)T * ldy, tm = (size_t)T * m, tn = (size_t)T * n;
  size_t nri = (size_t)n * w->b, nro = (size_t)m * w->b;
  float *x = rows_rand(T, n, 1.0f), *dy = rows_rand(T, m, 1.0f), *dx0 = rows_rand(T, n, 1.0f);
  float *ri0 = frand_n(nri, 1.0f), *ro0 = frand_n(nro, 1.0f), *ypad = fill(ny, SENTINEL);
  float *dX = dev_from(x, nx * 4), *dDY = dev_from(dy, ny * 4), *dZ = dev_alloc(tm * 4);
  float *dY1 = dev_from(ypad, ny * 4), *dY2 = dev_from(ypad, ny * 4);
  size_t fw = eng_cuda_poet_fwd_work_bytes(dw, T), bw = eng_cuda_poet_bwd_work_bytes(dw, T);
  void *work = dev_alloc(fw > bw ? fw : bw);

  double *u = dzeros(tn), *z = dzeros(tm), *y = dzeros(tm);
  ref_forward(w, T, x, u, z, y);
  K_OK(eng_cuda_poet_forward(cx, dw, T, dX, ldx, dY1, ldy, dZ, work, &err)); // fast: z kept
  K_OK(eng_cuda_poet_forward(cx, dw, T, dX, ldx, dY2, ldy, NULL, work, &err));
  rows_rel_err(w->bias ? "forward y (+ bias)" : "forward y", dY1, T, m, y);
  float *gz = dev_f32_to_host(dZ, tm);
  rel_err("forward kept z", gz, z, tm, FP32_TOL);
  expect_same("forward y, z kept or not", dY1, dY2, ny);

  // Backward, dx += from dx0 (fast: the kept z; memory: z NULL).
  double *rdx = widen_rows(dx0, T, n, ldx), *rri = to_double(ri0, nri), *rro = to_double(ro0, nro);
  ref_backward(w, T, u, z, dy, rdx, rri, rro);
  float *dDX[2], *dRI[2], *dRO[2];
  for (int mode = 0; mode < 2; mode++) {
    dDX[mode] = dev_from(dx0, nx * 4), dRI[mode] = dev_from(ri0, nri * 4), dRO[mode] = dev_from(ro0, nro * 4);
    K_OK(eng_cuda_poet_backward(cx, dw, T, dX, ldx, mode ? NULL : dZ, dDY, ldy, dDX[mode], ldx, 1, dRI[mode],
                                dRO[mode], work, &err));
  }
  rows_rel_err("backward dx +=", dDX[0], T, n, rdx);
  float *gri = dev_f32_to_host(dRI[0], nri), *gro = dev_f32_to_host(dRO[0], nro);
  rel_err("backward dR_in +=", gri, rri, nri, FP32_TOL);
  rel_err("backward dR_out +=", gro, rro, nro, FP32_TOL);
  expect_same("backward dx, z kept or not", dDX[0], dDX[1], nx);
  expect_same("backward dR_in, z kept or not", dRI[0], dRI[1], nri);
  expect_same("backward dR_out, z kept or not", dRO[0], dRO[1], nro);

  // dx = (add 0) over a buffer of garbage: every value is written.
  float *junk = rows_rand(T, n, 1e30f);
  to_dev(dDX[0], junk, nx * 4);
  K_OK(eng_cuda_poet_backward(cx, dw, T, dX, ldx, dZ, dDY, ldy, dDX[0], ldx, 0, dRI[0], dRO[0], work, &err));
  double *zero = dzeros(tn), *sink_i = dzeros(nri), *sink_o = dzeros(nro);
  ref_backward(w, T, u, z, dy, zero, sink_i, sink_o);
  rows_rel_err("backward dx =", dDX[0], T, n, zero);

  for (int mode = 0; mode < 2; mode++) cudaFree(dDX[mode]), cudaFree(dRI[mode]), cudaFree(dRO[mode]);
  cudaFree(dX), cudaFree(dDY), cudaFree(dZ), cudaFree(dY1), cudaFree(dY2), cudaFree(work);
  free(x), free(dy), free(dx0), free(ri0), free(ro0), free(ypad), free(u), free(z), free(y), free(gz), free(rdx);
  free(rri), free(rro), free(gri), free(gro), free(junk), free(zero), free(sink_i), free(sink_o);
}

static void check_weight(int m, int n, int b, int T, int with_bias) {
  printf("poet m=%d n=%d b=%d T=%d%s\n", m, n, b, T, with_bias ? " (bias)" : "");
  host_weight w = {.m = m, .n = n, .b = b};
  float *th_in = frand_n((n / b) * tri(b), 0.05f), *th_out = frand_n((m / b) * tri(b), 0.05f);
  float *dRin = check_cayley("in", n / b, b, th_in, &w.Rin);
  float *dRout = check_cayley("out", m / b, b, th_out, &w.Rout);
  check_cayley_bwd(m / b, b, th_out);

  check_rotate(T, n, b, dRin, w.Rin);
  check_rotate(T, m, b, dRout, w.Rout);
  w.pin = perm_rand(n), w.pout = perm_rand(m);
  int32_t *dpin = dev_from(w.pin, (size_t)n * 4), *dpout = dev_from(w.pout, (size_t)m * 4);
  check_perm(T, n, w.pin, dpin);
  check_perm(T, m, w.pout, dpout);

  w.W0 = frand_n((size_t)m * n, 0.2f);
  uint16_t *W0h = bf16_round(w.W0, (size_t)m * n), *bh = NULL;
  w.W0d = to_double(w.W0, (size_t)m * n);
  if (with_bias) {
    w.bias = frand_n(m, 0.5f);
    bh = bf16_round(w.bias, m);
  }
  eng_cuda_poet_weight dw = {.m = m, .n = n, .b = b, .pin = dpin, .pout = dpout, .Rin = dRin, .Rout = dRout};
  dw.W0 = dev_from(W0h, (size_t)m * n * 2);
  dw.bias = bh ? dev_from(bh, (size_t)m * 2) : NULL;
  check_chain(&w, &dw, T);

  cudaFree(dRin), cudaFree(dRout), cudaFree(dpin), cudaFree(dpout), cudaFree((void *)dw.W0);
  if (dw.bias) cudaFree((void *)dw.bias);
  free(th_in), free(th_out), free(w.Rin), free(w.Rout), free(w.pin), free(w.pout), free(w.W0), free(w.W0d);
  free(w.bias), free(W0h), free(bh);
}

int main(void) {
  gpu_require("test_gpu_poet");
  CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  K_OK(eng_cuda_ctx_open(&cx, st, &err));
  check_weight(48, 32, 8, 5, 1);
  check_weight(48, 32, 16, 5, 0);
  K_OK(eng_cuda_stream_sync(st, &err));
  eng_cuda_ctx_close(cx);
  cudaStreamDestroy(st);
  printf("gpu poet: ok\n");
  return 0;
}

#endif
