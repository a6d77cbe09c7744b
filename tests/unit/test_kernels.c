// The cpu kernels against naive double-precision references (forward and
// analytic backward); bit-for-bit: the thread count changes nothing, nor does
// splitting rows into calls (linear, head loss), and eng_k_sgemm computes
// exactly the chains it defines, through OpenBLAS or its own code. Sizes are
// small and odd on purpose: head dims that are not a multiple of the SIMD
// width or of the 8-row register blocks, T not a multiple of the tile, KV < H.
#include "kernels/kernels.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model/rope.h"
#include "kernels/cpu/gemm.h"
#include "route.h"
#include "kernels/cpu/kmath.h"

// Tolerances, as max|got − ref| / max|ref| over a tensor. fp32 kernels against
// double references: a forward is a few roundings per element; a backward
// chains several products and a softmax.
#define TOL_FWD 2e-6
#define TOL_BWD 1e-5

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float frand(void) { // uniform in [-1, 1)
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static int32_t irand(int n) { // uniform in [0, n)
  return (int32_t)((double)(frand() + 1.0f) * 0.5 * n) % n;
}

static float *falloc(size_t n) {
  float *p = malloc(sizeof(float) * (n ? n : 1));
  CHECK(p, "out of memory (%zu floats)", n);
  return p;
}

static double *dalloc(size_t n) {
  double *p = calloc(n ? n : 1, sizeof(double));
  CHECK(p, "out of memory (%zu doubles)", n);
  return p;
}

static float *frandn(size_t n, float scale) {
  float *p = falloc(n);
  for (size_t i = 0; i < n; i++) p[i] = scale * frand();
  return p;
}

static float *fcopy(const float *x, size_t n) {
  float *p = falloc(n);
  memcpy(p, x, sizeof(float) * n);
  return p;
}

static void expect_close(const char *what, const float *got, const double *ref, size_t n, double tol) {
  double emax = 0.0, rmax = 0.0;
  for (size_t i = 0; i < n; i++) {
    CHECK(isfinite(got[i]), "%s: element %zu is %g", what, i, got[i]);
    double e = fabs((double)got[i] - ref[i]);
    emax = e > emax ? e : emax;
    rmax = fabs(ref[i]) > rmax ? fabs(ref[i]) : rmax;
  }
  double rel = rmax > 0 ? emax / rmax : emax;
  printf("  %-28s rel err %.2e (tol %.0e)\n", what, rel, tol);
  CHECK(rel <= tol, "%s: relative error %.3g exceeds %.3g", what, rel, tol);
}

static void expect_same(const char *what, const float *a, const float *b, size_t n) {
  for (size_t i = 0; i < n; i++)
    CHECK(memcmp(&a[i], &b[i], sizeof(float)) == 0, "%s: element %zu differs: %.9g vs %.9g", what, i, a[i], b[i]);
}

// ---- exp -------------------------------------------------------------------

// The kernels' vectorisable exp (softmax, silu) against libm in double.
static void test_expf(void) {
  printf("expf\n");
  double worst = 0.0;
  for (float x = -87.0f; x <= 88.0f; x += 1.0009765625e-4f) {
    double want = exp((double)x), got = eng_k_expf(x);
    double ulp = ldexp(1.0, ilogb(want) - 23);
    double e = fabs(got - want) / ulp;
    worst = e > worst ? e : worst;
  }
  printf("  %-28s max err %.2f ulp (tol 2)\n", "expf on [-87, 88]", worst);
  CHECK(worst <= 2.0, "eng_k_expf is off by %.2f ulp", worst);
  CHECK(eng_k_expf(0.0f) == 1.0f, "exp(0) = %.9g", eng_k_expf(0.0f));
  CHECK(eng_k_expf(-INFINITY) == 0.0f && eng_k_expf(-100.0f) == 0.0f, "exp of very negative x is not 0");
  CHECK(isinf(eng_k_expf(100.0f)) && isnan(eng_k_expf(NAN)), "exp(100) or exp(NaN) wrong");
}

static void test_swiglu(void) {
  printf("swiglu\n");
  // 40 rows of 25: each row of gu is its 25 gate values, then its 25 up values.
  enum { ROWS = 40, FF = 25 };
  size_t n = ROWS * FF;
  float *g = frandn(n, 12.0f), *u = frandn(n, 1.0f), *dh = frandn(n, 1.0f);
  g[0] = 95.0f, g[1] = -95.0f, g[2] = 0.0f, g[3] = -87.5f, g[4] = 88.5f;
  float *gu = falloc(2 * n), *dgu = falloc(2 * n), *h = falloc(n), *dg = falloc(n), *du = falloc(n);
  for (size_t i = 0; i < n; i++) gu[i / FF * 2 * FF + i % FF] = g[i], gu[i / FF * 2 * FF + FF + i % FF] = u[i];
  double *rh = dalloc(n), *rdg = dalloc(n), *rdu = dalloc(n);
  eng_k_swiglu_fwd(h, gu, ROWS, FF);
  eng_k_swiglu_bwd(dgu, dh, gu, ROWS, FF);
  for (size_t i = 0; i < n; i++) dg[i] = dgu[i / FF * 2 * FF + i % FF], du[i] = dgu[i / FF * 2 * FF + FF + i % FF];
  for (size_t i = 0; i < n; i++) {
    double s = 1.0 / (1.0 + exp(-(double)g[i]));
    rh[i] = g[i] * s * u[i];
    rdu[i] = dh[i] * g[i] * s;
    rdg[i] = (double)dh[i] * u[i] * s * (1.0 + g[i] * (1.0 - s));
  }
  expect_close("swiglu fwd", h, rh, n, TOL_FWD);
  expect_close("swiglu bwd dgate", dg, rdg, n, TOL_FWD);
  expect_close("swiglu bwd dup", du, rdu, n, TOL_FWD);
  // Elementwise relative error, which the max-normalised check above hides.
  for (size_t i = 5; i < n; i++) {
    double e = fabs(h[i] - rh[i]) / (fabs(rh[i]) + 1e-30);
    CHECK(e < 1e-6 || fabs(rh[i]) < 1e-30, "silu(%g)·%g = %g, want %g", g[i], u[i], h[i], rh[i]);
  }
  free(g), free(u), free(dh), free(gu), free(dgu), free(h), free(dg), free(du), free(rh), free(rdg), free(rdu);
}

// ---- linear ----------------------------------------------------------------

static void test_linear(int n, int in, int out, int bias) {
  printf("linear n=%d in=%d out=%d bias=%d\n", n, in, out, bias);
  float *x = frandn((size_t)n * in, 1.0f), *w = frandn((size_t)out * in, 0.5f), *b = frandn((size_t)out, 1.0f);
  float *dy = frandn((size_t)n * out, 1.0f), *y = falloc((size_t)n * out);
  float *dx0 = frandn((size_t)n * in, 1.0f), *dw0 = frandn((size_t)out * in, 1.0f), *db0 = frandn((size_t)out, 1.0f);
  float *dx = fcopy(dx0, (size_t)n * in), *dxa = fcopy(dx0, (size_t)n * in);
  float *dw = fcopy(dw0, (size_t)out * in), *db = fcopy(db0, (size_t)out);
  double *ry = dalloc((size_t)n * out), *rdx = dalloc((size_t)n * in), *rdxa = dalloc((size_t)n * in);
  double *rdw = dalloc((size_t)out * in), *rdb = dalloc((size_t)out);
  eng_k_linear_fwd(y, x, w, bias ? b : NULL, n, in, out);
  eng_k_linear_bwd(dx, dw, bias ? db : NULL, dy, x, w, n, in, out, 0);
  eng_k_linear_bwd(dxa, NULL, NULL, dy, x, w, n, in, out, 1);
  for (int i = 0; i < n; i++)
    for (int o = 0; o < out; o++) {
      double s = bias ? b[o] : 0.0;
      for (int k = 0; k < in; k++) s += (double)x[(size_t)i * in + k] * w[(size_t)o * in + k];
      ry[(size_t)i * out + o] = s;
    }
  for (int i = 0; i < n; i++)
    for (int k = 0; k < in; k++) {
      double s = 0.0;
      for (int o = 0; o < out; o++) s += (double)dy[(size_t)i * out + o] * w[(size_t)o * in + k];
      rdx[(size_t)i * in + k] = s;
      rdxa[(size_t)i * in + k] = s + dx0[(size_t)i * in + k];
    }
  for (int o = 0; o < out; o++) {
    double sb = db0[o];
    for (int i = 0; i < n; i++) sb += dy[(size_t)i * out + o];
    rdb[o] = sb;
    for (int k = 0; k < in; k++) {
      double s = dw0[(size_t)o * in + k];
      for (int i = 0; i < n; i++) s += (double)dy[(size_t)i * out + o] * x[(size_t)i * in + k];
      rdw[(size_t)o * in + k] = s;
    }
  }
  expect_close("linear fwd", y, ry, (size_t)n * out, TOL_FWD);
  expect_close("linear bwd dx", dx, rdx, (size_t)n * in, TOL_FWD);
  expect_close("linear bwd dx (accumulate)", dxa, rdxa, (size_t)n * in, TOL_FWD);
  expect_close("linear bwd dw (+=)", dw, rdw, (size_t)out * in, TOL_FWD);
  if (bias) expect_close("linear bwd db (+=)", db, rdb, (size_t)out, TOL_FWD);
  else expect_same("linear bwd db untouched", db, db0, (size_t)out);
  free(x), free(w), free(b), free(dy), free(y), free(dx0), free(dw0), free(db0), free(dx), free(dxa), free(dw),
      free(db), free(ry), free(rdx), free(rdxa), free(rdw), free(rdb);
}

// ---- rmsnorm ---------------------------------------------------------------

static void test_rmsnorm(int n, int d) {
  printf("rmsnorm n=%d d=%d\n", n, d);
  const float eps = 1e-6f;
  float *x = frandn((size_t)n * d, 2.0f), *w = frandn((size_t)d, 1.0f), *dy = frandn((size_t)n * d, 1.0f);
  float *y = falloc((size_t)n * d), *rstd = falloc((size_t)n), *dw0 = frandn((size_t)d, 1.0f);
  float *dx0 = frandn((size_t)n * d, 1.0f), *dx = fcopy(dx0, (size_t)n * d), *dxa = fcopy(dx0, (size_t)n * d);
  float *dw = fcopy(dw0, (size_t)d);
  double *ry = dalloc((size_t)n * d), *rr = dalloc((size_t)n), *rdx = dalloc((size_t)n * d);
  double *rdxa = dalloc((size_t)n * d), *rdw = dalloc((size_t)d);
  eng_k_rmsnorm_fwd(y, rstd, x, w, n, d, eps);
  eng_k_rmsnorm_bwd(dx, dw, dy, NULL, x, w, rstd, n, d);
  eng_k_rmsnorm_bwd(dxa, NULL, dy, dxa, x, w, rstd, n, d);
  for (int j = 0; j < d; j++) rdw[j] = dw0[j];
  for (int i = 0; i < n; i++) {
    const float *xi = x + (size_t)i * d, *dyi = dy + (size_t)i * d;
    double ss = 0.0, c = 0.0;
    for (int j = 0; j < d; j++) ss += (double)xi[j] * xi[j];
    double r = 1.0 / sqrt(ss / d + eps);
    rr[i] = r;
    for (int j = 0; j < d; j++) {
      ry[(size_t)i * d + j] = xi[j] * r * w[j];
      c += (double)dyi[j] * w[j] * xi[j] * r;
      rdw[j] += (double)dyi[j] * xi[j] * r;
    }
    c /= d;
    for (int j = 0; j < d; j++) {
      double g = r * ((double)dyi[j] * w[j] - xi[j] * r * c);
      rdx[(size_t)i * d + j] = g;
      rdxa[(size_t)i * d + j] = g + dx0[(size_t)i * d + j];
    }
  }
  expect_close("rmsnorm fwd", y, ry, (size_t)n * d, TOL_FWD);
  expect_close("rmsnorm rstd", rstd, rr, (size_t)n, TOL_FWD);
  expect_close("rmsnorm bwd dx", dx, rdx, (size_t)n * d, TOL_BWD);
  expect_close("rmsnorm bwd dx (accumulate)", dxa, rdxa, (size_t)n * d, TOL_BWD);
  expect_close("rmsnorm bwd dw (+=)", dw, rdw, (size_t)d, TOL_BWD);
  free(x), free(w), free(dy), free(y), free(rstd), free(dw0), free(dx0), free(dx), free(dxa), free(dw), free(ry),
      free(rr), free(rdx), free(rdxa), free(rdw);
}

// The q/k norm: heads vectors of hd per row, rows ldx floats apart inside a
// wider buffer (the fused q|k|v output). Must give the bits of the plain norm
// over the [n·heads, hd] rows, and leave the rest of each row alone.
static void test_headnorm(int n, int heads, int hd, int ldx) {
  printf("headnorm n=%d heads=%d hd=%d ldx=%d\n", n, heads, hd, ldx);
  const float eps = 1e-6f;
  size_t nv = (size_t)n * heads, w_ = (size_t)heads * hd;
  float *x = frandn(nv * hd, 2.0f), *w = frandn((size_t)hd, 1.0f), *dy = frandn(nv * hd, 1.0f);
  float *y = falloc(nv * hd), *rstd = falloc(nv), *dx = falloc(nv * hd), *dw = falloc((size_t)hd);
  float *xs = falloc((size_t)n * ldx), *dxs = falloc((size_t)n * ldx), *ys = falloc(nv * hd), *rs = falloc(nv);
  float *dws = falloc((size_t)hd);
  memset(dw, 0, sizeof(float) * hd), memset(dws, 0, sizeof(float) * hd);
  for (size_t i = 0; i < (size_t)n * ldx; i++) xs[i] = -1.0f, dxs[i] = -2.0f;
  for (int i = 0; i < n; i++) memcpy(xs + (size_t)i * ldx, x + i * w_, sizeof(float) * w_);
  eng_k_rmsnorm_fwd(y, rstd, x, w, (int)nv, hd, eps);
  eng_k_rmsnorm_bwd(dx, dw, dy, NULL, x, w, rstd, (int)nv, hd);
  eng_k_headnorm_fwd(ys, (int)w_, rs, xs, ldx, w, n, heads, hd, eps);
  eng_k_headnorm_bwd(dxs, dws, dy, (int)w_, xs, ldx, w, rs, n, heads, hd);
  CHECK(!memcmp(y, ys, sizeof(float) * nv * hd) && !memcmp(rstd, rs, sizeof(float) * nv), "headnorm fwd differs");
  CHECK(!memcmp(dw, dws, sizeof(float) * hd), "headnorm dw differs");
  for (int i = 0; i < n; i++) {
    CHECK(!memcmp(dx + i * w_, dxs + (size_t)i * ldx, sizeof(float) * w_), "headnorm dx row %d differs", i);
    for (int j = (int)w_; j < ldx; j++) CHECK(dxs[(size_t)i * ldx + j] == -2.0f, "headnorm wrote past row %d", i);
  }
  free(x), free(w), free(dy), free(y), free(rstd), free(dx), free(dw), free(xs), free(dxs), free(ys), free(rs),
      free(dws);
}

// ---- position ids of packed rows ----------------------------------------------

// Position ids of B rows of T (kernels.h): documents of random lengths
// restarting at 0, one in four of 1 to 3 tokens, the others up to 150 (so a
// 64-query tile holds several starts and documents span tiles), and one
// starting exactly on a tile boundary where the row is long enough.
static int32_t *packed_pos(int B, int T) {
  int32_t *pos = malloc(sizeof(int32_t) * (size_t)B * T);
  CHECK(pos, "out of memory");
  for (int b = 0; b < B; b++)
    for (int t = 0, p = 0, len = 0; t < T; t++, p++) {
      if (p == len || t == 128) p = 0, len = irand(4) == 0 ? 1 + irand(3) : 1 + irand(150);
      pos[(size_t)b * T + t] = p;
    }
  return pos;
}

// 0..T-1 in every row: what NULL means.
static int32_t *iota_pos(int B, int T) {
  int32_t *pos = malloc(sizeof(int32_t) * (size_t)B * T);
  CHECK(pos, "out of memory");
  for (int i = 0; i < B * T; i++) pos[i] = i % T;
  return pos;
}

// ---- rope ------------------------------------------------------------------

// Reference rotation in double, with inv_freq and the angle rounded to fp32
// as transformers computes them (that rounding is part of the model); row t
// of batch b at position pos[b][t] (NULL: t).
static void rope_ref(double *out, const float *x, const int32_t *pos, int B, int T, int heads, int hd, float theta,
                     int inverse) {
  int h = hd / 2;
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int k = 0; k < heads; k++) {
        const float *xr = x + (((size_t)b * T + t) * heads + k) * hd;
        double *o = out + (((size_t)b * T + t) * heads + k) * hd;
        int p = pos ? pos[(size_t)b * T + t] : t;
        for (int i = 0; i < h; i++) {
          float inv = 1.0f / powf(theta, (float)(2 * i) / (float)hd);
          double a = (double)((float)p * inv), c = cos(a), s = inverse ? -sin(a) : sin(a);
          o[i] = xr[i] * c - xr[i + h] * s;
          o[i + h] = xr[i + h] * c + xr[i] * s;
        }
      }
}

static void test_rope(int B, int T, int heads, int hd, float theta, int packed) {
  printf("rope B=%d T=%d heads=%d hd=%d theta=%g%s\n", B, T, heads, hd, theta, packed ? " packed" : "");
  size_t n = (size_t)B * T * heads * hd;
  int32_t *pos = packed ? packed_pos(B, T) : NULL;
  float *x = frandn(n, 1.0f), *y = fcopy(x, n), *dy = frandn(n, 1.0f), *dx = fcopy(dy, n);
  double *ry = dalloc(n), *rdx = dalloc(n);
  eng_k_rope fr;
  eng_rope_table(&(eng_config){.rope_theta = theta, .head_dim = hd}, &fr);
  eng_k_rope_fwd(y, heads * hd, pos, B, T, heads, hd, &fr);
  eng_k_rope_bwd(dx, heads * hd, pos, B, T, heads, hd, &fr);
  rope_ref(ry, x, pos, B, T, heads, hd, theta, 0);
  rope_ref(rdx, dy, pos, B, T, heads, hd, theta, 1);
  expect_close("rope fwd", y, ry, n, TOL_FWD);
  expect_close("rope bwd", dx, rdx, n, TOL_FWD);
  // The backward is the transpose of the forward: <R x, dy> = <x, Rᵀ dy>.
  double l = 0.0, r = 0.0;
  for (size_t i = 0; i < n; i++) l += (double)y[i] * dy[i], r += (double)x[i] * dx[i];
  CHECK(fabs(l - r) <= 1e-5 * (fabs(l) + 1.0), "rope: <Rx,dy> = %.9g but <x,Rᵀdy> = %.9g", l, r);
  // Rows ld = heads·hd + 3 apart (a view into a wider row): the same bits, and
  // the 3 floats between rows untouched.
  int w = heads * hd, ld = w + 3;
  size_t rows = (size_t)B * T;
  float *z = falloc(rows * ld);
  for (size_t i = 0; i < rows * ld; i++) z[i] = (float)i;
  for (size_t i = 0; i < rows; i++) memcpy(z + i * ld, x + i * w, sizeof(float) * w);
  eng_k_rope_fwd(z, ld, pos, B, T, heads, hd, &fr);
  for (size_t i = 0; i < rows; i++) {
    CHECK(!memcmp(z + i * ld, y + i * w, sizeof(float) * w), "rope with ld %d: row %zu differs", ld, i);
    for (int j = w; j < ld; j++) CHECK(z[i * ld + j] == (float)(i * ld + j), "rope with ld %d wrote past row %zu", ld, i);
  }
  // Without pos, positions 0..T-1 written out give the same bits.
  if (!packed) {
    int32_t *iota = iota_pos(B, T);
    float *zi = fcopy(x, n);
    eng_k_rope_fwd(zi, heads * hd, iota, B, T, heads, hd, &fr);
    expect_same("rope with pos 0..T-1 vs NULL", zi, y, n);
    free(iota), free(zi);
  }
  free(x), free(y), free(dy), free(dx), free(ry), free(rdx), free(z), free(pos);
}

// ---- attention -------------------------------------------------------------

typedef struct att_case {
  int B, T, H, KV, hd;
} att_case;

// Naive GQA attention and its analytic backward, in double: query i of row
// b attends keys i - pos[b][i] .. i (NULL: 0 .. i), and with a window only
// those after i - window.
static void attention_ref(double *out, double *lse, double *dq, double *dk, double *dv, const float *dout,
                          const float *q, const float *k, const float *v, const int32_t *pos, att_case c,
                          int window) {
  int G = c.H / c.KV, hd = c.hd, T = c.T;
  size_t qs = (size_t)c.H * hd, ks = (size_t)c.KV * hd;
  double scale = 1.0 / sqrt((double)hd);
  double *p = dalloc((size_t)T), *dp = dalloc((size_t)T);
  memset(dk, 0, sizeof(double) * (size_t)c.B * T * ks);
  memset(dv, 0, sizeof(double) * (size_t)c.B * T * ks);
  for (int b = 0; b < c.B; b++)
    for (int h = 0; h < c.H; h++)
      for (int i = 0; i < T; i++) {
        const float *qi = q + ((size_t)b * T + i) * qs + (size_t)h * hd;
        const float *doi = dout + ((size_t)b * T + i) * qs + (size_t)h * hd;
        const float *kb = k + (size_t)b * T * ks + (size_t)(h / G) * hd, *vb = v + (size_t)b * T * ks + (size_t)(h / G) * hd;
        int j0 = pos ? i - pos[(size_t)b * T + i] : 0;
        if (window > 0 && i - window + 1 > j0) j0 = i - window + 1;
        double mx = -INFINITY, l = 0.0, D = 0.0;
        for (int j = j0; j <= i; j++) {
          double s = 0.0;
          for (int e = 0; e < hd; e++) s += (double)qi[e] * kb[(size_t)j * ks + e];
          p[j] = s * scale;
          mx = p[j] > mx ? p[j] : mx;
        }
        for (int j = j0; j <= i; j++) l += exp(p[j] - mx);
        for (int j = j0; j <= i; j++) p[j] = exp(p[j] - mx) / l;
        lse[((size_t)b * c.H + h) * T + i] = mx + log(l);
        double *o = out + ((size_t)b * T + i) * qs + (size_t)h * hd;
        double *dqi = dq + ((size_t)b * T + i) * qs + (size_t)h * hd;
        for (int e = 0; e < hd; e++) o[e] = 0.0, dqi[e] = 0.0;
        for (int j = j0; j <= i; j++) {
          dp[j] = 0.0;
          for (int e = 0; e < hd; e++) {
            o[e] += p[j] * vb[(size_t)j * ks + e];
            dp[j] += (double)doi[e] * vb[(size_t)j * ks + e];
          }
          D += p[j] * dp[j];
        }
        double *dkb = dk + (size_t)b * T * ks + (size_t)(h / G) * hd, *dvb = dv + (size_t)b * T * ks + (size_t)(h / G) * hd;
        for (int j = j0; j <= i; j++) {
          double ds = p[j] * (dp[j] - D) * scale;
          for (int e = 0; e < hd; e++) {
            dqi[e] += ds * kb[(size_t)j * ks + e];
            dkb[(size_t)j * ks + e] += ds * qi[e];
            dvb[(size_t)j * ks + e] += p[j] * doi[e];
          }
        }
      }
  free(p), free(dp);
}

static void test_attention(att_case c, int packed, int window) {
  printf("attention B=%d T=%d H=%d KV=%d hd=%d%s window %d\n", c.B, c.T, c.H, c.KV, c.hd, packed ? " packed" : "",
         window);
  size_t nq = (size_t)c.B * c.T * c.H * c.hd, nk = (size_t)c.B * c.T * c.KV * c.hd, nl = (size_t)c.B * c.H * c.T;
  int32_t *pos = packed ? packed_pos(c.B, c.T) : NULL;
  // Scores of a few units, so the softmax is neither flat nor one-hot.
  float *q = frandn(nq, 1.5f), *k = frandn(nk, 1.5f), *v = frandn(nk, 1.0f), *dout = frandn(nq, 1.0f);
  float *out = falloc(nq), *lse = falloc(nl), *dq = falloc(nq), *dk = falloc(nk), *dv = falloc(nk);
  double *rout = dalloc(nq), *rlse = dalloc(nl), *rdq = dalloc(nq), *rdk = dalloc(nk), *rdv = dalloc(nk);
  eng_k_attention_fwd(out, lse, q, c.H * c.hd, k, c.KV * c.hd, v, c.KV * c.hd, pos, c.B, c.T, c.H, c.KV, c.hd, window);
  eng_k_attention_bwd(dq, dk, dv, dout, out, lse, q, c.H * c.hd, k, c.KV * c.hd, v, c.KV * c.hd, pos, c.B, c.T, c.H,
                      c.KV, c.hd, window);
  attention_ref(rout, rlse, rdq, rdk, rdv, dout, q, k, v, pos, c, window);
  expect_close("attention fwd out", out, rout, nq, TOL_FWD);
  expect_close("attention fwd lse", lse, rlse, nl, TOL_FWD);
  expect_close("attention bwd dq", dq, rdq, nq, TOL_BWD);
  expect_close("attention bwd dk", dk, rdk, nk, TOL_BWD);
  expect_close("attention bwd dv", dv, rdv, nk, TOL_BWD);

  // q, k, v as views into one fused q|k|v row (+1 float of slack): the same
  // bits, and the gradients' rows written like the inputs' without touching
  // the slack.
  int qd = c.H * c.hd, kvd = c.KV * c.hd, ld = qd + 2 * kvd + 1;
  size_t rows = (size_t)c.B * c.T;
  float *qkv = falloc(rows * ld), *dqkv = falloc(rows * ld), *out2 = falloc(nq), *lse2 = falloc(nl);
  for (size_t i = 0; i < rows; i++) {
    memcpy(qkv + i * ld, q + i * qd, sizeof(float) * qd);
    memcpy(qkv + i * ld + qd, k + i * kvd, sizeof(float) * kvd);
    memcpy(qkv + i * ld + qd + kvd, v + i * kvd, sizeof(float) * kvd);
  }
  for (size_t i = 0; i < rows * ld; i++) dqkv[i] = -3.0f;
  eng_k_attention_fwd(out2, lse2, qkv, ld, qkv + qd, ld, qkv + qd + kvd, ld, pos, c.B, c.T, c.H, c.KV, c.hd, window);
  eng_k_attention_bwd(dqkv, dqkv + qd, dqkv + qd + kvd, dout, out2, lse2, qkv, ld, qkv + qd, ld, qkv + qd + kvd, ld,
                      pos, c.B, c.T, c.H, c.KV, c.hd, window);
  CHECK(!memcmp(out, out2, sizeof(float) * nq) && !memcmp(lse, lse2, sizeof(float) * nl),
        "attention fwd on a fused q|k|v row differs");
  for (size_t i = 0; i < rows; i++) {
    const float *r = dqkv + i * ld;
    CHECK(!memcmp(r, dq + i * qd, sizeof(float) * qd) && !memcmp(r + qd, dk + i * kvd, sizeof(float) * kvd) &&
              !memcmp(r + qd + kvd, dv + i * kvd, sizeof(float) * kvd) && r[ld - 1] == -3.0f,
          "attention bwd into a fused q|k|v row differs at row %zu", i);
  }
  // Without pos, positions 0..T-1 written out give the same bits.
  if (!packed) {
    int32_t *iota = iota_pos(c.B, c.T);
    eng_k_attention_fwd(out2, lse2, q, qd, k, kvd, v, kvd, iota, c.B, c.T, c.H, c.KV, c.hd, window);
    expect_same("attention fwd, pos 0..T-1 vs NULL", out2, out, nq);
    expect_same("attention lse, pos 0..T-1 vs NULL", lse2, lse, nl);
    float *dq2 = falloc(nq), *dk2 = falloc(nk), *dv2 = falloc(nk);
    eng_k_attention_bwd(dq2, dk2, dv2, dout, out, lse, q, qd, k, kvd, v, kvd, iota, c.B, c.T, c.H, c.KV, c.hd, window);
    expect_same("attention dq, pos 0..T-1 vs NULL", dq2, dq, nq);
    expect_same("attention dk, pos 0..T-1 vs NULL", dk2, dk, nk);
    expect_same("attention dv, pos 0..T-1 vs NULL", dv2, dv, nk);
    free(iota), free(dq2), free(dk2), free(dv2);
  }
  free(qkv), free(dqkv), free(out2), free(lse2), free(pos);
  free(q), free(k), free(v), free(dout), free(out), free(lse), free(dq), free(dk), free(dv), free(rout), free(rlse),
      free(rdq), free(rdk), free(rdv);
}

// Key tiles wholly before a query tile's earliest document start (or the
// start of its window) are not visited, forward or backward. A visited but masked key still meets an
// fmaf(0, value, .), so a NaN there would show: one row of two documents,
// [0, 70) and [70, 200), whose third query tile (128..) starts at 70 and
// so skips key tile 0 (0..63), which the second query tile must visit.
// NaN in k and v of key tile 0 leaves the third tile's out, lse and dq
// bit for bit; NaN in q and dout of the third tile leaves dk and dv of key
// tile 0 bit for bit.
static void test_attention_skip(int window) {
  printf("attention skips key tiles before a query tile's %s\n", window ? "window" : "documents");
  const att_case c = {1, 200, 2, 1, 16};
  const int W = 64, qd = c.H * c.hd, kvd = c.KV * c.hd;
  size_t nq = (size_t)c.T * qd, nk = (size_t)c.T * kvd, nl = (size_t)c.H * c.T;
  int32_t pos[200];
  for (int t = 0; t < c.T; t++) pos[t] = t < 70 ? t : t - 70;
  // Or one document and a window of 59: query tile 2's first key is 70 all
  // the same, and query 100 sees keys 42..100.
  const int32_t *ps = window ? NULL : pos;
  float *q = frandn(nq, 1.5f), *k = frandn(nk, 1.5f), *v = frandn(nk, 1.0f), *dout = frandn(nq, 1.0f);
  float *out = falloc(nq), *lse = falloc(nl), *dq = falloc(nq), *dk = falloc(nk), *dv = falloc(nk);
  float *out2 = falloc(nq), *lse2 = falloc(nl), *dq2 = falloc(nq), *dk2 = falloc(nk), *dv2 = falloc(nk);
  eng_k_attention_fwd(out, lse, q, qd, k, kvd, v, kvd, ps, c.B, c.T, c.H, c.KV, c.hd, window);
  eng_k_attention_bwd(dq, dk, dv, dout, out, lse, q, qd, k, kvd, v, kvd, ps, c.B, c.T, c.H, c.KV, c.hd, window);

  float *kp = fcopy(k, nk), *vp = fcopy(v, nk);
  for (size_t i = 0; i < (size_t)W * kvd; i++) kp[i] = vp[i] = NAN;
  eng_k_attention_fwd(out2, lse2, q, qd, kp, kvd, vp, kvd, ps, c.B, c.T, c.H, c.KV, c.hd, window);
  eng_k_attention_bwd(dq2, dk2, dv2, dout, out2, lse2, q, qd, kp, kvd, vp, kvd, ps, c.B, c.T, c.H, c.KV, c.hd, window);
  CHECK(isnan(out2[(size_t)100 * qd]), "a NaN value of key tile 0 did not reach query 100, which visits the tile");
  size_t r2 = (size_t)2 * W;
  expect_same("out of query tile 2, NaN in key tile 0", out2 + r2 * qd, out + r2 * qd, (c.T - r2) * qd);
  for (int h = 0; h < c.H; h++)
    expect_same("lse of query tile 2", lse2 + (size_t)h * c.T + r2, lse + (size_t)h * c.T + r2, c.T - r2);
  expect_same("dq of query tile 2", dq2 + r2 * qd, dq + r2 * qd, (c.T - r2) * qd);

  float *qp = fcopy(q, nq), *dp = fcopy(dout, nq);
  for (size_t i = r2 * qd; i < nq; i++) qp[i] = dp[i] = NAN;
  eng_k_attention_fwd(out2, lse2, qp, qd, k, kvd, v, kvd, ps, c.B, c.T, c.H, c.KV, c.hd, window);
  eng_k_attention_bwd(dq2, dk2, dv2, dp, out2, lse2, qp, qd, k, kvd, v, kvd, ps, c.B, c.T, c.H, c.KV, c.hd, window);
  CHECK(isnan(dk2[(size_t)100 * kvd]), "a NaN query of tile 2 did not reach key 100, which it visits");
  expect_same("dk of key tile 0, NaN in query tile 2", dk2, dk, (size_t)W * kvd);
  expect_same("dv of key tile 0, NaN in query tile 2", dv2, dv, (size_t)W * kvd);
  free(q), free(k), free(v), free(dout), free(out), free(lse), free(dq), free(dk), free(dv), free(out2), free(lse2),
      free(dq2), free(dk2), free(dv2), free(kp), free(vp), free(qp), free(dp);
}

// ---- embedding -------------------------------------------------------------

static void test_embed(int n, int d, int vocab) {
  printf("embed n=%d d=%d vocab=%d\n", n, d, vocab);
  float *table = frandn((size_t)vocab * d, 1.0f), *x = falloc((size_t)n * d), *dx = frandn((size_t)n * d, 1.0f);
  float *dt = frandn((size_t)vocab * d, 1.0f), *want = fcopy(dt, (size_t)vocab * d);
  int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
  CHECK(ids, "out of memory");
  for (int i = 0; i < n; i++) ids[i] = irand(vocab); // repeats on purpose
  eng_k_embed_fwd(x, table, ids, n, d);
  for (int i = 0; i < n; i++) expect_same("embed fwd row", x + (size_t)i * d, table + (size_t)ids[i] * d, (size_t)d);
  eng_k_embed_bwd(dt, dx, ids, n, d);
  // The documented order (rows added in i order) makes the result exact.
  for (int i = 0; i < n; i++)
    for (int j = 0; j < d; j++) want[(size_t)ids[i] * d + j] += dx[(size_t)i * d + j];
  expect_same("embed bwd", dt, want, (size_t)vocab * d);
  // As one group: each row's sum over the group first (from zero, in i
  // order), then added; so the group adds to a used table the bits it would
  // add to a zero one plus that table.
  float *dg = frandn((size_t)vocab * d, 1.0f), *gwant = fcopy(dg, (size_t)vocab * d);
  float *sum = calloc((size_t)vocab * d, sizeof *sum);
  CHECK(sum, "out of memory");
  for (int i = 0; i < n; i++)
    for (int j = 0; j < d; j++) sum[(size_t)ids[i] * d + j] += dx[(size_t)i * d + j];
  for (size_t k = 0; k < (size_t)vocab * d; k++) gwant[k] += sum[k];
  CHECK(eng_k_embed_bwd_group(dg, dx, ids, n, d) == 0, "embed bwd group failed");
  expect_same("embed bwd group", dg, gwant, (size_t)vocab * d);
  free(dg), free(gwant), free(sum);
  free(table), free(x), free(dx), free(dt), free(want), free(ids);
}

// ---- head loss -------------------------------------------------------------

static int32_t *make_targets(int n, int V) {
  int32_t *t = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
  CHECK(t, "out of memory");
  for (int i = 0; i < n; i++) t[i] = i % 7 == 3 ? -100 : irand(V);
  return t;
}

static void test_head_loss(int n, int d, int V) {
  printf("head_loss n=%d d=%d V=%d\n", n, d, V);
  float *h = frandn((size_t)n * d, 1.0f), *w = frandn((size_t)V * d, 0.5f);
  int32_t *t = make_targets(n, V);
  int count = 0;
  for (int i = 0; i < n; i++) count += t[i] >= 0;
  float gs = 1.0f / (float)count;
  float *scratch = falloc(eng_k_head_loss_scratch_floats(V));
  float *dh = falloc((size_t)n * d), *dw0 = frandn((size_t)V * d, 1.0f), *dw = fcopy(dw0, (size_t)V * d);
  float *logits = falloc((size_t)n * V);
  double loss = eng_k_head_loss(dh, dw, logits, h, w, t, n, d, V, gs, scratch);
  double *rl = dalloc((size_t)n * V), *rdl = dalloc((size_t)n * V), *rdh = dalloc((size_t)n * d);
  double *rdw = dalloc((size_t)V * d), rloss = 0.0;
  for (int i = 0; i < n; i++) {
    double *li = rl + (size_t)i * V, mx = -INFINITY, s = 0.0;
    for (int j = 0; j < V; j++) {
      double z = 0.0;
      for (int e = 0; e < d; e++) z += (double)h[(size_t)i * d + e] * w[(size_t)j * d + e];
      li[j] = z;
      mx = z > mx ? z : mx;
    }
    if (t[i] < 0) continue;
    for (int j = 0; j < V; j++) s += exp(li[j] - mx);
    double lse = mx + log(s);
    rloss += lse - li[t[i]];
    for (int j = 0; j < V; j++) rdl[(size_t)i * V + j] = (exp(li[j] - lse) - (j == t[i])) * gs;
  }
  for (int i = 0; i < n; i++)
    for (int e = 0; e < d; e++) {
      double s = 0.0;
      for (int j = 0; j < V; j++) s += rdl[(size_t)i * V + j] * w[(size_t)j * d + e];
      rdh[(size_t)i * d + e] = s;
    }
  for (int j = 0; j < V; j++)
    for (int e = 0; e < d; e++) {
      double s = dw0[(size_t)j * d + e];
      for (int i = 0; i < n; i++) s += rdl[(size_t)i * V + j] * h[(size_t)i * d + e];
      rdw[(size_t)j * d + e] = s;
    }
  expect_close("head_loss logits", logits, rl, (size_t)n * V, TOL_FWD);
  double lerr = fabs(loss - rloss) / fabs(rloss);
  printf("  %-28s rel err %.2e (tol %.0e)\n", "head_loss loss", lerr, TOL_FWD);
  CHECK(lerr <= TOL_FWD, "head_loss: loss %.12g, want %.12g", loss, rloss);
  expect_close("head_loss dh", dh, rdh, (size_t)n * d, TOL_BWD);
  expect_close("head_loss dw (+=)", dw, rdw, (size_t)V * d, TOL_BWD);

  // Forward only: the same loss and logits.
  float *logits2 = falloc((size_t)n * V);
  double loss2 = eng_k_head_loss(NULL, NULL, logits2, h, w, t, n, d, V, gs, scratch);
  CHECK(loss2 == loss, "head_loss forward-only loss %.17g differs from %.17g", loss2, loss);
  expect_same("head_loss fwd-only logits", logits2, logits, (size_t)n * V);

  // Split invariance: rows in two calls give each row the same bits.
  int splits[] = {1, 5, 63, 64, 65, 255, 256, 257, n - 1};
  for (size_t s = 0; s < sizeof splits / sizeof *splits; s++) {
    int a = splits[s];
    if (a <= 0 || a >= n) continue;
    float *dh2 = falloc((size_t)n * d), *dw2 = fcopy(dw0, (size_t)V * d);
    double l1 = eng_k_head_loss(dh2, dw2, logits2, h, w, t, a, d, V, gs, scratch);
    double l2 = eng_k_head_loss(dh2 + (size_t)a * d, dw2, logits2 + (size_t)a * V, h + (size_t)a * d, w, t + a,
                                n - a, d, V, gs, scratch);
    expect_same("head_loss split logits", logits2, logits, (size_t)n * V);
    expect_same("head_loss split dh", dh2, dh, (size_t)n * d);
    CHECK(fabs(l1 + l2 - loss) <= 1e-12 * fabs(loss), "head_loss split at %d: loss %.17g vs %.17g", a, l1 + l2, loss);
    free(dh2), free(dw2);
  }
  free(h), free(w), free(t), free(scratch), free(dh), free(dw0), free(dw), free(logits), free(logits2), free(rl),
      free(rdl), free(rdh), free(rdw);
}

// ---- sumsq -----------------------------------------------------------------

static void test_sumsq(void) {
  printf("sumsq\n");
  size_t sizes[] = {0, 1, 4095, 4097, (size_t)256 * 4096 + 5};
  for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
    size_t n = sizes[s];
    float *x = frandn(n, 3.0f);
    double want = 0.0;
    for (size_t i = 0; i < n; i++) want += (double)x[i] * x[i];
    double got = eng_k_sumsq(x, n);
    CHECK(fabs(got - want) <= 1e-12 * want, "sumsq n=%zu: %.17g, want %.17g", n, got, want);
    free(x);
  }
}

// ---- sgemm -----------------------------------------------------------------

// eng_k_sgemm's definition, bit for bit: per block of ENG_K_GEMM_KB k, one
// fmaf chain from 0, blocks added into C in order, on every route of this
// cpu but amx. Shapes take every path: on avx512 and avx2 partial row
// blocks and panels, a few rows (threads split the panels), column chunks
// (8192 wide), several k blocks, row-major rows packed (K = 1024); on blas
// OpenBLAS (which must compute exactly these chains where the route lets it)
// and the own chains, including M = 1 and k that OpenBLAS would split.
static void test_sgemm(void) {
  eng_k_gemm_route route = eng_k_gemm_route_get();
  int shapes[][3] = {{40, 300, 800}, {1, 8192, 300}, {700, 64, 64}, {18, 64, 64}, {16, 1000, 48}, {37, 33, 500},
                     {600, 100, 400}, {523, 1000, 384}, {5, 3000, 70}, {30, 70, 1024}};
  for (eng_k_gemm_route r = ENG_K_GEMM_AVX512; r < ENG_K_GEMM_NROUTES; r++) {
    if (eng_k_gemm_route_set(r) != 0) {
      printf("sgemm chains on %s: this cpu cannot run it\n", eng_k_gemm_route_name(r));
      continue;
    }
    printf("sgemm chains on %s\n", eng_k_gemm_route_name(r));
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
      int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
      float *a = frandn((size_t)M * K, 1.0f), *b = frandn((size_t)N * K, 1.0f), *c0 = frandn((size_t)M * N, 4.0f);
      float *c = falloc((size_t)M * N);
      for (int form = 0; form < 4; form++) // NT, NN, TN, TT
        for (int beta = 0; beta < 2; beta++) {
          int ta = form >= 2, tb = form == 0 || form == 3;
          memcpy(c, c0, sizeof(float) * (size_t)M * N);
          eng_k_sgemm(ta, tb, M, N, K, a, ta ? M : K, b, tb ? K : N, (float)beta, c, N);
          for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
              float want = beta ? c0[(size_t)i * N + j] : 0.0f;
              for (int k0 = 0; k0 < K; k0 += ENG_K_GEMM_KB) {
                float chain = 0.0f;
                for (int k = k0; k < K && k < k0 + ENG_K_GEMM_KB; k++)
                  chain = fmaf(ta ? a[(size_t)k * M + i] : a[(size_t)i * K + k],
                               tb ? b[(size_t)j * K + k] : b[(size_t)k * N + j], chain);
                want = k0 == 0 && !beta ? chain : want + chain;
              }
              float got = c[(size_t)i * N + j];
              CHECK(memcmp(&got, &want, sizeof got) == 0,
                    "sgemm %s form %d beta %d M=%d N=%d K=%d: C[%d][%d] = %.9g, want %.9g", eng_k_gemm_route_name(r),
                    form, beta, M, N, K, i, j, got, want);
            }
        }
      free(a), free(b), free(c0), free(c);
    }
  }
  CHECK(eng_k_gemm_route_set(route) == 0, "back to the %s route", eng_k_gemm_route_name(route));
}

// eng_k_sgemm_bdiag(_grad)'s definition, bit for bit, on every route this
// cpu runs (amx's included: the fp32 chains there too): each block's
// elements as fmaf chains per ENG_K_GEMM_KB, added in order. Blocks of 32
// (one panel), 24 and 40 (partial panels on avx512's 32 columns and
// avx2's 16), 48 (two avx2 panels), 400 (two chunks of k); T of 1, 13 and
// 800 (partial row tiles; three chunks of t for the gradient); leading
// dimensions wider than the product.
static void test_sgemm_bdiag(void) {
  eng_k_gemm_route route = eng_k_gemm_route_get();
  const int shapes[][3] = {{800, 384, 32}, {13, 96, 24}, {1, 80, 40}, {37, 96, 48}, {13, 800, 400}};
  for (eng_k_gemm_route r = 0; r < ENG_K_GEMM_NROUTES; r++) {
    if (eng_k_gemm_route_set(r) != 0) {
      printf("block-diagonal chains on %s: this cpu cannot run it\n", eng_k_gemm_route_name(r));
      continue;
    }
    printf("block-diagonal chains on %s\n", eng_k_gemm_route_name(r));
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
      const int T = shapes[s][0], dim = shapes[s][1], b = shapes[s][2], lda = dim + 3, nblk = dim / b;
      float *a = frandn((size_t)T * lda, 1.0f), *d = frandn((size_t)T * lda, 1.0f);
      float *B = frandn((size_t)nblk * b * b, 0.2f), *c = frandn((size_t)T * lda, 1.0f);
      float *g0 = frandn((size_t)nblk * b * b, 1.0f), *g = fcopy(g0, (size_t)nblk * b * b);
      float *work = falloc(eng_k_bdiag_work(dim, b));
      for (int tb = 0; tb < 2; tb++) {
        eng_k_sgemm_bdiag(T, dim, b, a, lda, B, tb, c, lda, work);
        for (int t = 0; t < T; t++)
          for (int j = 0; j < dim; j++) {
            const int k = j / b, jj = j % b;
            const float *bk = B + (size_t)k * b * b;
            float want = 0.0f;
            for (int i0 = 0; i0 < b; i0 += ENG_K_GEMM_KB) {
              float chain = 0.0f;
              for (int i = i0; i < b && i < i0 + ENG_K_GEMM_KB; i++)
                chain = fmaf(a[(size_t)t * lda + k * b + i], tb ? bk[(size_t)jj * b + i] : bk[(size_t)i * b + jj], chain);
              want = i0 == 0 ? chain : want + chain;
            }
            float got = c[(size_t)t * lda + j];
            CHECK(memcmp(&got, &want, sizeof got) == 0, "bdiag %s T=%d dim=%d b=%d tb=%d: C[%d][%d] = %.9g, want %.9g",
                  eng_k_gemm_route_name(r), T, dim, b, tb, t, j, got, want);
          }
      }
      eng_k_sgemm_bdiag_grad(T, dim, b, a, lda, d, lda, g);
      for (int k = 0; k < nblk; k++)
        for (int i = 0; i < b; i++)
          for (int j = 0; j < b; j++) {
            size_t at = (size_t)k * b * b + (size_t)i * b + j;
            float want = g0[at];
            for (int t0 = 0; t0 < T; t0 += ENG_K_GEMM_KB) {
              float chain = 0.0f;
              for (int t = t0; t < T && t < t0 + ENG_K_GEMM_KB; t++)
                chain = fmaf(a[(size_t)t * lda + k * b + i], d[(size_t)t * lda + k * b + j], chain);
              want += chain;
            }
            CHECK(memcmp(&g[at], &want, sizeof want) == 0, "bdiag grad %s T=%d dim=%d b=%d: C[%d][%d][%d] = %.9g, want %.9g",
                  eng_k_gemm_route_name(r), T, dim, b, k, i, j, g[at], want);
          }
      free(a), free(d), free(B), free(c), free(g0), free(g), free(work);
    }
  }
  CHECK(eng_k_gemm_route_set(route) == 0, "back to the %s route", eng_k_gemm_route_name(route));
}

// The AMX route, where this cpu has one: against double, the error of fp32
// (the tile unit's internal rounding is not specified, so the bits are
// checked by their properties): beta 1 gives C + (the beta 0 result) in one
// rounding, and a block of rows and columns computed alone gives the same
// bits as inside the whole product. K of 1100 takes three passes; with 2 MiB
// of L2, 1 × 8192 packs A as the whole operand, 523 × 1000 meets B's blocks
// in groups, and 600³ does both groups and passes.
static void test_sgemm_amx(void) {
  eng_k_gemm_route route = eng_k_gemm_route_get();
  if (eng_k_gemm_route_set(ENG_K_GEMM_AMX) != 0) {
    printf("sgemm amx: this cpu cannot run it\n");
    return;
  }
  printf("sgemm amx\n");
  int shapes[][3] = {{40, 300, 800}, {1, 8192, 300}, {700, 64, 64},     {37, 33, 500},
                     {64, 64, 1100}, {523, 1000, 384}, {600, 600, 600}};
  for (int s = 0; s < 7; s++) {
    int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
    float *a = frandn((size_t)M * K, 1.0f), *b = frandn((size_t)N * K, 1.0f), *c0 = frandn((size_t)M * N, 4.0f);
    float *c = falloc((size_t)M * N), *c1 = falloc((size_t)M * N), *want = falloc((size_t)M * N);
    float *part = falloc((size_t)M * N);
    double *ref = dalloc((size_t)M * N);
    for (int form = 0; form < 4; form++) { // NT, NN, TN, TT
      int ta = form >= 2, tb = form == 0 || form == 3, lda = ta ? M : K, ldb = tb ? K : N;
      char what[64];
      snprintf(what, sizeof what, "form %d %dx%dx%d", form, M, N, K);
      eng_k_sgemm(ta, tb, M, N, K, a, lda, b, ldb, 0.0f, c, N);
      for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
          double r = 0.0;
          for (int k = 0; k < K; k++)
            r += (double)(ta ? a[(size_t)k * M + i] : a[(size_t)i * K + k]) *
                 (tb ? b[(size_t)j * K + k] : b[(size_t)k * N + j]);
          ref[(size_t)i * N + j] = r;
        }
      expect_close(what, c, ref, (size_t)M * N, TOL_FWD);
      memcpy(c1, c0, sizeof(float) * (size_t)M * N);
      eng_k_sgemm(ta, tb, M, N, K, a, lda, b, ldb, 1.0f, c1, N);
      for (size_t e = 0; e < (size_t)M * N; e++) want[e] = c0[e] + c[e];
      expect_same("sgemm amx beta 1 = C + the beta 0 result", c1, want, (size_t)M * N);
      int i0 = M / 3, ni = M - i0 < 17 ? M - i0 : 17, j0 = N / 5, nj = N - j0 < 45 ? N - j0 : 45;
      eng_k_sgemm(ta, tb, ni, nj, K, ta ? a + i0 : a + (size_t)i0 * K, lda, tb ? b + (size_t)j0 * K : b + j0, ldb, 0.0f,
                  part, nj);
      for (int i = 0; i < ni; i++)
        expect_same("sgemm amx block alone = inside the whole product", part + (size_t)i * nj,
                    c + (size_t)(i0 + i) * N + j0, (size_t)nj);
    }
    free(a), free(b), free(c0), free(c), free(c1), free(want), free(part), free(ref);
  }
  CHECK(eng_k_gemm_route_set(route) == 0, "back to the %s route", eng_k_gemm_route_name(route));
}

// A row's y and dx are the same bits whether the rows come in one call or
// several (600 rows go to OpenBLAS, 300 and fewer do not).
static void test_linear_split(void) {
  printf("linear row split invariance\n");
  int n = 600, in = 64, out = 64;
  float *x = frandn((size_t)n * in, 1.0f), *w = frandn((size_t)out * in, 0.5f), *b = frandn((size_t)out, 1.0f);
  float *dy = frandn((size_t)n * out, 1.0f);
  float *y = falloc((size_t)n * out), *y2 = falloc((size_t)n * out), *dx = falloc((size_t)n * in), *dx2 = falloc((size_t)n * in);
  eng_k_linear_fwd(y, x, w, b, n, in, out);
  eng_k_linear_bwd(dx, NULL, NULL, dy, x, w, n, in, out, 0);
  int splits[] = {1, 16, 300, 599};
  for (int s = 0; s < 4; s++) {
    int r = splits[s];
    for (int part = 0; part < 2; part++) {
      int r0 = part ? r : 0, m = part ? n - r : r;
      eng_k_linear_fwd(y2 + (size_t)r0 * out, x + (size_t)r0 * in, w, b, m, in, out);
      eng_k_linear_bwd(dx2 + (size_t)r0 * in, NULL, NULL, dy + (size_t)r0 * out, x + (size_t)r0 * in, w, m, in, out, 0);
    }
    expect_same("linear y, rows split", y2, y, (size_t)n * out);
    expect_same("linear dx, rows split", dx2, dx, (size_t)n * in);
  }
  free(x), free(w), free(b), free(dy), free(y), free(y2), free(dx), free(dx2);
}

// A row epilogue (eng_k_linear_*_then) sees each row exactly once, after its
// product is final, with the bias added: the results equal the product and
// the same elementwise step after it, bit for bit, whether the rows go
// through the packed route (600 rows × 100 columns) or not (100 rows).
typedef struct epi {
  float *y, *z;
  int out;
  int *seen;
} epi;

static void epi_rows(void *c, int r0, int r1) {
  epi *p = c;
  for (int i = r0; i < r1; i++) {
    p->seen[i]++;
    for (int j = 0; j < p->out; j++) p->z[(size_t)i * p->out + j] = p->y[(size_t)i * p->out + j] * 0.75f - 1.0f;
  }
}

static void test_linear_then(int n) {
  printf("linear row epilogue n=%d\n", n);
  const int in = 64, out = 100;
  float *x = frandn((size_t)n * in, 1.0f), *w = frandn((size_t)out * in, 0.5f), *b = frandn((size_t)out, 1.0f);
  float *dy = frandn((size_t)n * out, 1.0f), *y = falloc((size_t)n * out), *y2 = falloc((size_t)n * out);
  float *z = falloc((size_t)n * out), *dx = falloc((size_t)n * in), *dx2 = falloc((size_t)n * in);
  float *dz = falloc((size_t)n * in);
  int *seen = calloc((size_t)n, sizeof(int));
  CHECK(seen, "out of memory");
  eng_k_linear_fwd(y, x, w, b, n, in, out);
  epi e = {y2, z, out, seen};
  eng_k_linear_fwd_then(y2, x, w, b, n, in, out, epi_rows, &e);
  expect_same("linear_fwd_then y", y2, y, (size_t)n * out);
  for (int i = 0; i < n; i++) {
    CHECK(seen[i] == 1, "row %d seen %d times by the forward epilogue", i, seen[i]);
    for (int j = 0; j < out; j++) {
      float want = y[(size_t)i * out + j] * 0.75f - 1.0f;
      CHECK(!memcmp(&z[(size_t)i * out + j], &want, sizeof want), "forward epilogue row %d differs", i);
    }
    seen[i] = 0;
  }
  eng_k_linear_bwd(dx, NULL, NULL, dy, x, w, n, in, out, 0);
  epi eb = {dx2, dz, in, seen};
  eng_k_linear_bwd_then(dx2, NULL, NULL, dy, x, w, n, in, out, 0, epi_rows, &eb);
  expect_same("linear_bwd_then dx", dx2, dx, (size_t)n * in);
  for (int i = 0; i < n; i++) CHECK(seen[i] == 1, "row %d seen %d times by the backward epilogue", i, seen[i]);
  free(x), free(w), free(b), free(dy), free(y), free(y2), free(z), free(dx), free(dx2), free(dz), free(seen);
}

// ---- thread-count invariance -----------------------------------------------

// Every kernel on sizes large enough to go parallel, once per thread count;
// outputs are concatenated into one buffer and compared bit for bit.
typedef struct inv_io {
  float *buf;
  size_t len, cap;
} inv_io;

static float *take(inv_io *io, size_t n) {
  CHECK(io->len + n <= io->cap, "invariance buffer too small");
  float *p = io->buf + io->len;
  io->len += n;
  return p;
}

static void run_all(inv_io *io, const float *src, int nthreads) {
  // The OpenMP build of OpenBLAS follows this too.
  omp_set_num_threads(nthreads);
  io->len = 0;
  // k of 600 and 1000 exercise eng_k_sgemm's k blocks (dx, dw, dh).
  const int n = 600, d = 128, ff = 600, V = 1000;
  const att_case c = {2, 130, 4, 2, 40};
  size_t off = 0;
#define IN(cnt) (src + (off += (cnt)) - (cnt))
  const float *x = IN((size_t)n * d), *w = IN((size_t)ff * d), *b = IN((size_t)ff), *dy = IN((size_t)n * ff);
  float *y = take(io, (size_t)n * ff), *dx = take(io, (size_t)n * d), *dw = take(io, (size_t)ff * d);
  float *db = take(io, (size_t)ff);
  memset(dw, 0, sizeof(float) * (size_t)ff * d), memset(db, 0, sizeof(float) * (size_t)ff);
  eng_k_linear_fwd(y, x, w, b, n, d, ff);
  eng_k_linear_bwd(dx, dw, db, dy, x, w, n, d, ff, 0);

  const float *nw = IN((size_t)d), *ndy = IN((size_t)n * d);
  float *ny = take(io, (size_t)n * d), *nr = take(io, (size_t)n), *ndx = take(io, (size_t)n * d), *ndw = take(io, (size_t)d);
  memset(ndw, 0, sizeof(float) * (size_t)d);
  eng_k_rmsnorm_fwd(ny, nr, x, nw, n, d, 1e-5f);
  eng_k_rmsnorm_bwd(ndx, ndw, ndy, NULL, x, nw, nr, n, d);

  size_t nq = (size_t)c.B * c.T * c.H * c.hd, nk = (size_t)c.B * c.T * c.KV * c.hd;
  float *q = take(io, nq), *k = take(io, nk);
  memcpy(q, IN(nq), sizeof(float) * nq), memcpy(k, IN(nk), sizeof(float) * nk);
  const float *v = IN(nk), *dout = IN(nq);
  eng_k_rope fr;
  eng_rope_table(&(eng_config){.rope_theta = 10000.0f, .head_dim = c.hd}, &fr);
  eng_k_rope_fwd(q, c.H * c.hd, NULL, c.B, c.T, c.H, c.hd, &fr);
  eng_k_rope_fwd(k, c.KV * c.hd, NULL, c.B, c.T, c.KV, c.hd, &fr);
  float *out = take(io, nq), *lse = take(io, (size_t)c.B * c.H * c.T);
  float *dq = take(io, nq), *dk = take(io, nk), *dv = take(io, nk);
  eng_k_attention_fwd(out, lse, q, c.H * c.hd, k, c.KV * c.hd, v, c.KV * c.hd, NULL, c.B, c.T, c.H, c.KV, c.hd, 0);
  eng_k_attention_bwd(dq, dk, dv, dout, out, lse, q, c.H * c.hd, k, c.KV * c.hd, v, c.KV * c.hd, NULL, c.B, c.T, c.H,
                      c.KV, c.hd, 0);
  eng_k_rope_bwd(dq, c.H * c.hd, NULL, c.B, c.T, c.H, c.hd, &fr);
  // The same packed: each row documents of 41, 41, 15 and 33 tokens.
  int32_t pos[2 * 130];
  for (int i = 0; i < c.B * c.T; i++) pos[i] = (i % c.T % 97) % 41;
  float *pout = take(io, nq), *plse = take(io, (size_t)c.B * c.H * c.T);
  float *pdq = take(io, nq), *pdk = take(io, nk), *pdv = take(io, nk);
  eng_k_attention_fwd(pout, plse, q, c.H * c.hd, k, c.KV * c.hd, v, c.KV * c.hd, pos, c.B, c.T, c.H, c.KV, c.hd, 0);
  eng_k_attention_bwd(pdq, pdk, pdv, dout, pout, plse, q, c.H * c.hd, k, c.KV * c.hd, v, c.KV * c.hd, pos, c.B, c.T,
                      c.H, c.KV, c.hd, 0);
  eng_k_rope_bwd(pdq, c.H * c.hd, pos, c.B, c.T, c.H, c.hd, &fr);

  // y read as n/2 rows of [gate | up], ff each.
  size_t ne = (size_t)n / 2 * ff;
  float *hh = take(io, ne), *dgu = take(io, 2 * ne);
  eng_k_swiglu_fwd(hh, y, n / 2, ff);
  eng_k_swiglu_bwd(dgu, IN(ne), y, n / 2, ff);

  int32_t ids[600];
  for (int i = 0; i < n; i++) ids[i] = (i * 37) % 50;
  float *e = take(io, (size_t)n * d), *dt = take(io, (size_t)50 * d);
  memset(dt, 0, sizeof(float) * 50 * d);
  eng_k_embed_fwd(e, w, ids, n, d);
  eng_k_embed_bwd(dt, ndy, ids, n, d);

  const float *hw = IN((size_t)V * d);
  int32_t t[600];
  for (int i = 0; i < n; i++) t[i] = i % 7 == 3 ? -100 : (i * 131) % V;
  float *scratch = falloc(eng_k_head_loss_scratch_floats(V));
  float *hdh = take(io, (size_t)n * d), *hdw = take(io, (size_t)V * d), *lg = take(io, (size_t)n * V);
  memset(hdw, 0, sizeof(float) * (size_t)V * d);
  double loss = eng_k_head_loss(hdh, hdw, lg, x, hw, t, n, d, V, 1.0f / n, scratch);
  double sq = eng_k_sumsq(src, off);
  memcpy(take(io, 2), &loss, sizeof loss);
  memcpy(take(io, 2), &sq, sizeof sq);
  free(scratch);
#undef IN
}

static void test_thread_invariance(void) {
  printf("thread-count invariance (1 vs 2 threads)\n");
  size_t srcn = 4000000, cap = 6000000;
  float *src = frandn(srcn, 1.0f);
  inv_io a = {falloc(cap), 0, cap}, b = {falloc(cap), 0, cap};
  run_all(&a, src, 1);
  run_all(&b, src, 2);
  CHECK(a.len == b.len, "invariance runs produced %zu and %zu floats", a.len, b.len);
  expect_same("outputs with 1 vs 2 threads", a.buf, b.buf, a.len);
  free(src), free(a.buf), free(b.buf);
}

int main(void) {
  test_route_announce();
  test_expf();
  test_swiglu();
  test_linear(37, 29, 23, 1);
  test_linear(5, 64, 48, 0);
  test_rmsnorm(7, 50);
  test_rmsnorm(130, 200);
  test_headnorm(300, 4, 32, 4 * 32 + 2 * 2 * 32);
  test_rope(2, 13, 3, 10, 10000.0f, 0);
  test_rope(1, 70, 2, 64, 1000000.0f, 0);
  test_rope(3, 200, 2, 16, 10000.0f, 1);
  test_attention((att_case){2, 70, 4, 2, 24}, 0, 0);
  test_attention((att_case){1, 129, 3, 1, 18}, 0, 0);
  test_attention((att_case){1, 64, 2, 2, 32}, 0, 0);
  test_attention((att_case){2, 100, 2, 1, 40}, 0, 0);
  test_attention((att_case){3, 1, 2, 1, 8}, 0, 0);
  test_attention((att_case){3, 300, 4, 2, 24}, 1, 0);
  test_attention((att_case){2, 129, 3, 1, 40}, 1, 0);
  test_attention((att_case){4, 5, 2, 1, 8}, 1, 0);
  // Sliding windows: inside a tile, a tile wide, across tiles (whole key
  // tiles skipped), wider than the rows, and with packed documents.
  test_attention((att_case){2, 200, 4, 2, 24}, 0, 17);
  test_attention((att_case){1, 257, 3, 1, 40}, 0, 64);
  test_attention((att_case){2, 300, 2, 1, 32}, 0, 150);
  test_attention((att_case){1, 70, 2, 2, 16}, 0, 500);
  test_attention((att_case){3, 300, 4, 2, 24}, 1, 50);
  test_attention((att_case){2, 129, 3, 1, 18}, 1, 1);
  test_attention_skip(0);
  test_attention_skip(59);
  test_embed(100, 40, 17);
  test_head_loss(300, 40, 1000);
  test_head_loss(5, 16, 33);
  test_sumsq();
  test_sgemm();
  test_sgemm_bdiag();
  test_sgemm_amx();
  // The invariances on this process's route; ctest runs this test once
  // per route (tests/route.h).
  test_linear_split();
  test_linear_then(600);
  test_linear_then(100);
  test_thread_invariance();
  printf("ok\n");
  return 0;
}
