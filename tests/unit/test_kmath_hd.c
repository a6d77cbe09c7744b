// The per-element math shared by the cpu and cuda kernels (kernels/kmath_hd.h),
// on the host: each function against a straightforward double-precision
// formula, and the cpu kernels' outputs against the shared functions, bit
// for bit where the kernel is built from them (so a kernel that drifts from
// the shared formula, and with it from the GPU, fails here). The GPU side
// of the same functions is checked in tests/gpu.
#include "kernels/kmath_hd.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model/rope.h"
#include "common/bf16.h"
#include "kernels/cpu/kmath.h"
#include "kernels/kernels.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;

static uint64_t u64(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}

static float frand(float scale) { return scale * (float)((double)(u64() >> 11) / 9007199254740992.0 * 2.0 - 1.0); }

// |got − want| in units of the float spacing at want.
static double ulps(float got, double want) {
  double spacing = want == 0.0 ? ldexp(1.0, -149) : ldexp(1.0, ilogb((float)want) - 23);
  return fabs((double)got - want) / spacing;
}

static void report(const char *what, double err, double tol) {
  printf("  %-44s %.3g (tol %.3g)\n", what, err, tol);
  CHECK(err <= tol, "%s: %.6g exceeds %.6g", what, err, tol);
}

// ---- bf16 ---------------------------------------------------------------------------

// Round to nearest even by comparing the two neighbours in double.
static uint16_t bf16_ref(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if (isnan(f)) return (uint16_t)((u >> 16) | 0x40u);
  uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
  if ((u & 0xffffu) == 0) return lo;
  double dl = fabs((double)f - eng_bf16_to_f32(lo)), dh = fabs((double)f - eng_bf16_to_f32(hi));
  if (isinf(eng_bf16_to_f32(hi)) && !isinf(f)) // the step past the largest finite: its distance is 2^128 - f
    dh = fabs(ldexp(1.0, 128) * (f < 0 ? -1 : 1) - (double)f);
  return dl < dh ? lo : dh < dl ? hi : (lo & 1) ? hi : lo;
}

static void check_bf16(void) {
  printf("bf16\n");
  const uint32_t lows[] = {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu, 0x4000u, 0xc000u};
  size_t n = 0;
  for (uint32_t hi = 0; hi < 0x10000u; hi++)
    for (int k = 0; k < 9; k++) {
      uint32_t u = hi << 16 | (k < 8 ? lows[k] : (uint32_t)(u64() & 0xffffu));
      float f;
      memcpy(&f, &u, 4);
      uint16_t got = eng_km_bf16_from_f32(f);
      CHECK(got == eng_bf16_from_f32(f), "%#010x: shared %#06x, common/bf16.h %#06x", u, got, eng_bf16_from_f32(f));
      CHECK(got == bf16_ref(f), "%#010x: %#06x, nearest-even is %#06x", u, got, bf16_ref(f));
      uint32_t back;
      float w = eng_km_bf16_to_f32(got);
      memcpy(&back, &w, 4);
      CHECK(back == (uint32_t)got << 16, "widening %#06x", got);
      n++;
    }
  printf("  %-44s %zu values, exact\n", "rounding (ties, NaN, inf, subnormals)", n);
}

// ---- exp ----------------------------------------------------------------------------

static void check_expf(void) {
  printf("exp\n");
  double worst = 0;
  for (int i = 0; i <= 2000000; i++) {
    float x = -87.0f + 175.0f * (float)i / 2000000.0f;
    double u = ulps(eng_km_expf(x), exp((double)x));
    worst = u > worst ? u : worst;
  }
  report("max ulp on [-87, 88]", worst, 2.0);
  CHECK(eng_km_expf(0.0f) == 1.0f && eng_km_expf(-INFINITY) == 0.0f && eng_km_expf(-100.0f) == 0.0f,
        "exp edge values");
  CHECK(isinf(eng_km_expf(100.0f)) && isnan(eng_km_expf(NAN)), "exp of 100 or NaN");
  CHECK(eng_k_expf(1.5f) == eng_km_expf(1.5f), "the cpu kernels' exp is not the shared one");
}

// ---- RMSNorm --------------------------------------------------------------------------

static void check_rmsnorm(void) {
  printf("rmsnorm\n");
  enum { N = 37, D = 203 };
  float *x = malloc(sizeof(float) * N * D), w[D], *dy = malloc(sizeof(float) * N * D);
  for (int i = 0; i < N * D; i++) x[i] = frand(4.0f), dy[i] = frand(1.0f);
  for (int j = 0; j < D; j++) w[j] = 1.0f + frand(0.5f);
  float *y = malloc(sizeof(float) * N * D), r[N], *dx = malloc(sizeof(float) * N * D), dw[D] = {0};
  eng_k_rmsnorm_fwd(y, r, x, w, N, D, 1e-6f);
  eng_k_rmsnorm_bwd(dx, dw, dy, NULL, x, w, r, N, D);
  double worst_r = 0, worst_dx = 0, mdx = 0;
  double dwr[D] = {0};
  for (int i = 0; i < N; i++) {
    const float *xi = x + i * D, *dyi = dy + i * D;
    // Shared pieces, summed the cpu's way, give the kernel's bits.
    float rs = eng_km_rms_rstd(eng_k_sumsq_row(xi, D), D, 1e-6f);
    CHECK(!memcmp(&rs, &r[i], 4), "row %d: rstd %.9g vs the kernel's %.9g", i, rs, r[i]);
    double acc[8] = {0};
    for (int j = 0; j < D; j++) acc[j % 8] += eng_km_rms_dot_term(dyi[j], w[j], xi[j], rs);
    float c = eng_km_rms_c(eng_km_sum8_tree(acc), D);
    for (int j = 0; j < D; j++) {
      float yv = eng_km_rms_y(xi[j], rs, w[j]), dv = eng_km_rms_dx(dyi[j], w[j], xi[j], rs, c);
      CHECK(!memcmp(&yv, &y[i * D + j], 4) && !memcmp(&dv, &dx[i * D + j], 4), "row %d col %d differs from the kernel",
            i, j);
    }
    // Against double formulas.
    double ss = 0, dot = 0;
    for (int j = 0; j < D; j++) ss += (double)xi[j] * xi[j];
    double rr = 1.0 / sqrt(ss / D + 1e-6);
    worst_r = fmax(worst_r, fabs(rs - rr) / rr);
    for (int j = 0; j < D; j++) dot += (double)dyi[j] * w[j] * xi[j] * rr;
    for (int j = 0; j < D; j++) {
      double want = rr * (dyi[j] * (double)w[j] - xi[j] * rr * dot / D);
      worst_dx = fmax(worst_dx, fabs(dx[i * D + j] - want));
      mdx = fmax(mdx, fabs(want));
      dwr[j] += (double)dyi[j] * xi[j] * rr;
    }
  }
  double worst_dw = 0, mdw = 0;
  for (int j = 0; j < D; j++) worst_dw = fmax(worst_dw, fabs(dw[j] - dwr[j])), mdw = fmax(mdw, fabs(dwr[j]));
  printf("  %-44s exact\n", "kernel = shared pieces (rstd, y, dx)");
  report("rstd vs double, relative", worst_r, 2e-7);
  report("dx vs double, max|d|/max|ref|", worst_dx / mdx, 1e-6);
  report("dw vs double, max|d|/max|ref|", worst_dw / mdw, 1e-6);
  free(x), free(dy), free(y), free(dx);
}

// ---- RoPE ----------------------------------------------------------------------------

static void check_rope(void) {
  printf("rope\n");
  enum { T = 50, HD = 64 };
  float *x = malloc(sizeof(float) * T * HD), *ref = malloc(sizeof(float) * T * HD);
  for (int i = 0; i < T * HD; i++) x[i] = frand(2.0f);
  memcpy(ref, x, sizeof(float) * T * HD);
  eng_k_rope fr;
  eng_rope_table(&(eng_config){.rope_theta = 10000.0f, .head_dim = HD}, &fr);
  eng_k_rope_fwd(ref, HD, NULL, 1, T, 1, HD, &fr);
  double worst_f = 0, worst_x = 0;
  for (int i = 0; i < HD / 2; i++) {
    float f = eng_km_rope_inv_freq(i, HD, 10000.0f);
    worst_f = fmax(worst_f, ulps(f, pow(10000.0, -2.0 * i / HD)));
  }
  for (int t = 0; t < T; t++)
    for (int i = 0; i < HD / 2; i++) {
      float a = eng_km_rope_angle(t, eng_km_rope_inv_freq(i, HD, 10000.0f)), c = cosf(a), s = sinf(a);
      float u = x[t * HD + i], v = x[t * HD + i + HD / 2];
      float lo = eng_km_rope_lo(u, v, c, s), hi = eng_km_rope_hi(u, v, c, s);
      CHECK(!memcmp(&lo, &ref[t * HD + i], 4) && !memcmp(&hi, &ref[t * HD + i + HD / 2], 4),
            "t %d pair %d differs from the kernel", t, i);
      double ad = t * pow(10000.0, -2.0 * i / HD);
      worst_x = fmax(worst_x, fabs(lo - (u * cos(ad) - v * sin(ad))));
      worst_x = fmax(worst_x, fabs(hi - (v * cos(ad) + u * sin(ad))));
    }
  printf("  %-44s exact\n", "kernel = shared pieces");
  report("inv_freq vs double, ulp", worst_f, 2.0);
  // fp32 angles of positions up to 50 are off by up to ~50 ulp of 1.
  report("rotated values vs double angles, absolute", worst_x, 2e-5);
  free(x), free(ref);
}

// ---- online softmax -----------------------------------------------------------------

// Folds a row of scores in blocks of `block` and returns lse and Σ p·v.
static void osm_row(const float *s, const float *v, int n, int block, float *lse, float *out) {
  float m = -INFINITY, l = 0.0f, acc = 0.0f;
  for (int b0 = 0; b0 < n; b0 += block) {
    int e = b0 + block < n ? b0 + block : n;
    float mn = m, sum = 0.0f, pv = 0.0f;
    for (int j = b0; j < e; j++) mn = eng_km_osm_max(mn, s[j]);
    float alpha = eng_km_osm_alpha(m, mn);
    for (int j = b0; j < e; j++) {
      float p = eng_km_osm_p(s[j], mn);
      sum += p;
      pv += p * v[j];
    }
    l = eng_km_osm_sum(l, alpha, sum);
    acc = acc * alpha + pv;
    m = mn;
  }
  *lse = eng_km_osm_lse(m, l);
  *out = acc / l;
}

static void check_online_softmax(void) {
  printf("online softmax\n");
  enum { N = 300 };
  float s[N], v[N];
  double worst_l = 0, worst_o = 0;
  for (int rep = 0; rep < 50; rep++) {
    for (int j = 0; j < N; j++) s[j] = frand(rep < 25 ? 10.0f : 60.0f), v[j] = frand(1.0f);
    double mx = -INFINITY, z = 0, pv = 0;
    for (int j = 0; j < N; j++) mx = fmax(mx, s[j]);
    for (int j = 0; j < N; j++) z += exp(s[j] - mx), pv += exp(s[j] - mx) * v[j];
    double lse = mx + log(z), out = pv / z;
    const int blocks[] = {1, 7, 64, N};
    for (int b = 0; b < 4; b++) {
      float gl, go;
      osm_row(s, v, N, blocks[b], &gl, &go);
      worst_l = fmax(worst_l, fabs(gl - lse) / fabs(lse));
      worst_o = fmax(worst_o, fabs(go - out));
    }
  }
  report("lse vs double, relative (blocks 1..300)", worst_l, 1e-6);
  report("out = sum(p*v)/l vs double, absolute", worst_o, 1e-5);
  // The attention kernel's lse from the same updates.
  enum { T = 45, HD = 16 };
  float q[T * HD], k[T * HD], vv[T * HD], o[T * HD], lse[T];
  for (int i = 0; i < T * HD; i++) q[i] = frand(1.0f), k[i] = frand(1.0f), vv[i] = frand(1.0f);
  eng_k_attention_fwd(o, lse, q, HD, k, HD, vv, HD, NULL, 1, T, 1, 1, HD, 0);
  double worst_a = 0;
  for (int i = 0; i < T; i++) {
    float sc[T], dummy[T], gl, go;
    for (int j = 0; j <= i; j++) {
      double a = 0;
      for (int c = 0; c < HD; c++) a += (double)q[i * HD + c] * k[j * HD + c];
      sc[j] = (float)a * (1.0f / sqrtf((float)HD)), dummy[j] = 0.0f;
    }
    osm_row(sc, dummy, i + 1, 64, &gl, &go);
    worst_a = fmax(worst_a, fabs(gl - lse[i]) / fabs(lse[i]));
  }
  report("cpu attention lse vs shared updates", worst_a, 1e-6);
  // The backward's pieces.
  float p = eng_km_attn_p(2.0f, 0.25f, 0.1f), ds = eng_km_attn_ds(p, 0.3f, 0.2f, 0.25f);
  report("attn_p vs double", fabs(p - exp(0.5 - 0.1)) / exp(0.4), 3e-7);
  report("attn_ds vs double", fabs(ds - (double)p * 0.1 * 0.25), 1e-8);
}

// ---- cross-entropy -------------------------------------------------------------------------

static void check_cross_entropy(void) {
  printf("cross-entropy\n");
  enum { V = 1000 };
  float x[V];
  double worst_lse = 0, worst_tree = 0, worst_d = 0;
  for (int rep = 0; rep < 40; rep++) {
    for (int j = 0; j < V; j++) x[j] = frand(rep < 20 ? 5.0f : 40.0f);
    double mx = -INFINITY, z = 0;
    for (int j = 0; j < V; j++) mx = fmax(mx, x[j]);
    for (int j = 0; j < V; j++) z += exp(x[j] - mx);
    double lse = mx + log(z);
    // One sequential fold, and a tree of 16 parts as a GPU block combines.
    float m = -INFINITY;
    double s = 0;
    for (int j = 0; j < V; j++) eng_km_lse_add(&m, &s, x[j]);
    float pm[16];
    double ps[16];
    for (int p = 0; p < 16; p++) {
      pm[p] = -INFINITY, ps[p] = 0;
      for (int j = p; j < V; j += 16) eng_km_lse_add(&pm[p], &ps[p], x[j]);
    }
    for (int w = 8; w >= 1; w /= 2)
      for (int p = 0; p < w; p++) eng_km_lse_combine(&pm[p], &ps[p], pm[p + w], ps[p + w]);
    int t = (int)(u64() % V);
    worst_lse = fmax(worst_lse, fabs(eng_km_ce_loss(m, s, x[t]) - (lse - x[t])) / fabs(lse));
    worst_tree = fmax(worst_tree, fabs(eng_km_ce_loss(pm[0], ps[0], x[t]) - (lse - x[t])) / fabs(lse));
    float inv = eng_km_ce_inv(s);
    for (int j = 0; j < V; j++) {
      double want = (exp(x[j] - lse) - (j == t)) * 0.5;
      worst_d = fmax(worst_d, fabs(eng_km_ce_dlogit(eng_km_expf(x[j] - m), inv, j == t, 0.5f) - want));
    }
  }
  report("loss, sequential fold vs double, relative", worst_lse, 1e-6);
  report("loss, 16-part tree vs double, relative", worst_tree, 1e-6);
  report("dlogit vs double, absolute", worst_d, 1e-6);
  float m = -INFINITY;
  double s = 0;
  eng_km_lse_combine(&m, &s, -INFINITY, 0.0);
  CHECK(m == -INFINITY && s == 0.0, "combining two empty pairs gave (%g, %g)", m, s);

  // The cpu head loss against the shared fold, row by row.
  enum { N = 9, D = 24, VV = 301 };
  float h[N * D], w[VV * D], lg[N * VV], scratch[256 * VV];
  int32_t tg[N];
  for (int i = 0; i < N * D; i++) h[i] = frand(1.0f);
  for (int i = 0; i < VV * D; i++) w[i] = frand(1.0f);
  for (int i = 0; i < N; i++) tg[i] = i == 4 ? -1 : (int32_t)(u64() % VV);
  CHECK(eng_k_head_loss_scratch_floats(VV) <= sizeof scratch / sizeof *scratch, "scratch too small");
  double total = eng_k_head_loss(NULL, NULL, lg, h, w, tg, N, D, VV, 1.0f, scratch), want = 0;
  for (int i = 0; i < N; i++) {
    if (tg[i] < 0) continue;
    float mm = -INFINITY;
    double ss = 0;
    for (int j = 0; j < VV; j++) eng_km_lse_add(&mm, &ss, lg[i * VV + j]);
    want += eng_km_ce_loss(mm, ss, lg[i * VV + tg[i]]);
  }
  report("cpu head loss vs shared fold, relative", fabs(total - want) / want, 1e-6);
}

// ---- SwiGLU --------------------------------------------------------------------------------

static void check_swiglu(void) {
  printf("swiglu\n");
  enum { ROWS = 401, FF = 251, N = ROWS * FF }; // rows of gu: FF gate values, then FF up values
  float *g = malloc(N * 4), *u = malloc(N * 4), *dh = malloc(N * 4), *h = malloc(N * 4), *dg = malloc(N * 4),
        *du = malloc(N * 4), *gu = malloc(N * 8), *dgu = malloc(N * 8);
  for (int i = 0; i < N; i++) g[i] = frand(12.0f), u[i] = frand(3.0f), dh[i] = frand(1.0f);
  g[0] = 90.0f, g[1] = -90.0f, g[2] = 0.0f;
  for (int i = 0; i < N; i++) gu[i / FF * 2 * FF + i % FF] = g[i], gu[i / FF * 2 * FF + FF + i % FF] = u[i];
  eng_k_swiglu_fwd(h, gu, ROWS, FF);
  eng_k_swiglu_bwd(dgu, dh, gu, ROWS, FF);
  for (int i = 0; i < N; i++) dg[i] = dgu[i / FF * 2 * FF + i % FF], du[i] = dgu[i / FF * 2 * FF + FF + i % FF];
  double worst_h = 0, worst_g = 0, worst_u = 0, mh = 0, mg = 0, mu = 0;
  for (int i = 0; i < N; i++) {
    float a, b, hv = eng_km_swiglu(g[i], u[i]);
    eng_km_swiglu_bwd(dh[i], g[i], u[i], &a, &b);
    CHECK(!memcmp(&hv, &h[i], 4) && !memcmp(&a, &dg[i], 4) && !memcmp(&b, &du[i], 4),
          "element %d differs from the kernel", i);
    double sg = 1.0 / (1.0 + exp(-(double)g[i])), wh = g[i] * sg * u[i];
    double wg = (double)dh[i] * u[i] * sg * (1.0 + g[i] * (1.0 - sg)), wu = (double)dh[i] * g[i] * sg;
    worst_h = fmax(worst_h, fabs(hv - wh)), mh = fmax(mh, fabs(wh));
    worst_g = fmax(worst_g, fabs(a - wg)), mg = fmax(mg, fabs(wg));
    worst_u = fmax(worst_u, fabs(b - wu)), mu = fmax(mu, fabs(wu));
  }
  printf("  %-44s exact\n", "kernel = shared functions");
  report("h vs double, max|d|/max|ref|", worst_h / mh, 1e-6);
  report("dgate vs double, max|d|/max|ref|", worst_g / mg, 2e-6);
  report("dup vs double, max|d|/max|ref|", worst_u / mu, 1e-6);
  free(g), free(u), free(dh), free(h), free(dg), free(du), free(gu), free(dgu);
}

// ---- sums ------------------------------------------------------------------------------------

static void check_sum8(void) {
  printf("sums\n");
  enum { N = 4096 * 3 + 77 };
  float *x = malloc(N * 4);
  for (int i = 0; i < N; i++) x[i] = frand(3.0f);
  // eng_k_sumsq: blocks of 4096, 8 lanes combined by the shared tree.
  double total = 0, exact = 0;
  for (int b0 = 0; b0 < N; b0 += 4096) {
    double acc[8] = {0};
    for (int i = b0; i < N && i < b0 + 4096; i++) acc[(i - b0) % 8] += (double)x[i] * x[i];
    total += eng_km_sum8_tree(acc);
  }
  for (int i = 0; i < N; i++) exact += (double)x[i] * x[i];
  double k = eng_k_sumsq(x, N);
  CHECK(!memcmp(&k, &total, 8), "eng_k_sumsq %.17g, the shared structure %.17g", k, total);
  printf("  %-44s exact\n", "eng_k_sumsq = blocks of the shared tree");
  report("vs a plain double sum, relative", fabs(total - exact) / exact, 1e-12);
  free(x);
}

int main(void) {
  check_bf16();
  check_expf();
  check_rmsnorm();
  check_rope();
  check_online_softmax();
  check_cross_entropy();
  check_swiglu();
  check_sum8();
  printf("kmath_hd: ok\n");
  return 0;
}
