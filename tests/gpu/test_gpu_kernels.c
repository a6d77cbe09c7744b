// Every cuda kernel against the cpu kernels (which share its per-element
// math) or against a double-precision reference where the cpu kernel needs
// OpenBLAS (linear, head loss), on bf16 inputs, so both sides read the same
// numbers. Sizes are odd on purpose: rows that are not a multiple of a warp,
// sequences that end inside a 64-row tile, packed rows (documents whose
// position ids restart inside tiles), grouped kv heads, head dims of
// 16, 64 and 128, vector and scalar paths. Tolerances are stated per check:
// multiples of bf16's epsilon (2^-7) for bf16 outputs, absolute numbers for
// fp32 ones; "exact" means bit for bit.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef TRAIND_HAVE_CUDA
int main(void) {
  fprintf(stderr, "test_gpu_kernels: SKIP: this build has no CUDA backend\n");
  return 77;
}
#else

#include "common/bf16.h"
#include "gpu_test.h"
#include "kernels/kernels.h"
#include "model/rope.h"

static eng_err err;
static cudaStream_t st;
static eng_cuda_ctx *cx;

#define K_OK(call) CHECK_OK(call, &err)

static void expect_exact_bf16(const char *what, const uint16_t *got, const float *ref, size_t n) {
  for (size_t i = 0; i < n; i++)
    CHECK(got[i] == eng_km_bf16_from_f32(ref[i]), "%s: element %zu is %#06x, the rounded cpu value is %#06x (%.9g)",
          what, i, got[i], eng_km_bf16_from_f32(ref[i]), ref[i]);
  printf("  %-34s exact\n", what);
}

static void expect_same_f32(const char *what, const float *a, const float *b, size_t n) {
  CHECK(memcmp(a, b, n * sizeof *a) == 0, "%s: results differ", what);
  printf("  %-34s exact\n", what);
}

static uint16_t *dev_u16(const void *dev, size_t n) {
  uint16_t *h = malloc(n * 2 + 2);
  CHECK(h, "out of memory");
  host_from(h, dev, n * 2);
  return h;
}

// ---- conversions ------------------------------------------------------------------

static void check_convert(void) {
  printf("convert\n");
  const size_t n = 1 << 20;
  uint32_t *bits = malloc(n * 4);
  for (size_t i = 0; i < n; i++) bits[i] = (uint32_t)(gpu_u64() >> 32);
  // Ties, NaNs, infinities, subnormals and the largest finite values.
  const uint32_t special[] = {0x00000000u, 0x80000000u, 0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0xff7fffffu,
                              0x7f800000u, 0xff800000u, 0x7fc00001u, 0xff800001u, 0x00000001u, 0x00008000u,
                              0x007fffffu, 0x7f7f8000u, 0x3f7fffffu, 0x00018000u};
  memcpy(bits, special, sizeof special);
  float *df = dev_from(bits, n * 4);
  uint16_t *dh = dev_alloc(n * 2);
  float *back = dev_alloc(n * 4);
  K_OK(eng_cuda_bf16_from_f32(dh, df, n, st, &err));
  K_OK(eng_cuda_bf16_to_f32(back, dh, n, st, &err));
  uint16_t *h = dev_u16(dh, n);
  uint32_t *b = (uint32_t *)dev_f32_to_host(back, n);
  for (size_t i = 0; i < n; i++) {
    float f;
    memcpy(&f, &bits[i], 4);
    CHECK(h[i] == eng_bf16_from_f32(f), "bf16 of %#010x is %#06x on the GPU, %#06x on the host", bits[i], h[i],
          eng_bf16_from_f32(f));
    CHECK(b[i] == (uint32_t)h[i] << 16, "widening %#06x gave %#010x", h[i], b[i]);
  }
  printf("  %-34s exact\n", "bf16 <-> fp32, 1M values");
  cudaFree(df), cudaFree(dh), cudaFree(back), free(bits), free(h), free(b);
}

// ---- RMSNorm ------------------------------------------------------------------------

static void check_rmsnorm_shape(int n, int d) {
  printf("rmsnorm n=%d d=%d\n", n, d);
  size_t nd = (size_t)n * d;
  float *x = frand_n(nd, 3.0f), *w = frand_n(d, 0.5f), *dy = frand_n(nd, 1.0f), *dx0 = frand_n(nd, 1.0f);
  for (int j = 0; j < d; j++) w[j] += 1.0f;
  uint16_t *xh = bf16_round(x, nd), *wh = bf16_round(w, d), *dyh = bf16_round(dy, nd), *dx0h = bf16_round(dx0, nd);
  void *dX = dev_from(xh, nd * 2), *dW = dev_from(wh, d * 2), *dY = dev_alloc(nd * 2), *dR = dev_alloc(n * 4);
  K_OK(eng_cuda_rmsnorm_fwd(dY, dR, dX, dW, n, d, 1e-6f, st, &err));
  float *y = malloc(nd * 4), *r = malloc(n * 4);
  eng_k_rmsnorm_fwd(y, r, x, w, n, d, 1e-6f);
  float *gr = dev_f32_to_host(dR, n), *gy = dev_bf16_to_host(dY, nd);
  // rstd: the same fp32 formula on a double sum taken in another order.
  rel_err_f("rstd (fp32)", gr, r, n, 1e-6);
  // y: the cpu's fp32 value rounded once to bf16.
  rel_err_f("y (0.5 eps: the output rounding)", gy, y, nd, 0.5 * BF16_EPS + 1e-6);

  void *dDY = dev_from(dyh, nd * 2), *dDX = dev_from(dx0h, nd * 2);
  float *ddw = dev_alloc(d * 4);
  K_OK(eng_cuda_rmsnorm_bwd(cx, dDX, ddw, dDY, dX, dW, dR, n, d, 1, &err));
  float *dx = malloc(nd * 4), *dw = calloc(d, 4);
  memcpy(dx, dx0, nd * 4);
  eng_k_rmsnorm_bwd(dx, dw, dy, dx, x, w, gr, n, d);
  float *gdx = dev_bf16_to_host(dDX, nd), *gdw = dev_f32_to_host(ddw, d);
  rel_err_f("dx += (0.5 eps: the output rounding)", gdx, dx, nd, 0.5 * BF16_EPS + 1e-6);
  rel_err_f("dw (fp32, double sums)", gdw, dw, d, 1e-6);
  cudaFree(dX), cudaFree(dW), cudaFree(dY), cudaFree(dR), cudaFree(dDY), cudaFree(dDX), cudaFree(ddw);
  free(x), free(w), free(dy), free(dx0), free(xh), free(wh), free(dyh), free(dx0h), free(y), free(r), free(gr);
  free(gy), free(dx), free(dw), free(gdx), free(gdw);
}

// Position ids of packed rows (kernels.h): documents of random lengths
// from 1 to 150 tokens (a few shorter than 4) restart at 0, so tiles of 64
// hold several starts and some documents span tiles; NULL when !packed.
static int32_t *packed_pos(int B, int T, int packed) {
  if (!packed) return NULL;
  int32_t *pos = malloc((size_t)B * T * sizeof *pos);
  CHECK(pos, "out of memory");
  for (int b = 0; b < B; b++)
    for (int t = 0, p = 0, len = 0; t < T; t++, p++) {
      if (p == len) p = 0, len = gpu_irand(4) == 0 ? 1 + gpu_irand(3) : 1 + gpu_irand(150);
      pos[(size_t)b * T + t] = p;
    }
  return pos;
}

// ---- RoPE --------------------------------------------------------------------------

static void check_rope(int B, int T, int heads, int hd, float theta, int packed) {
  printf("rope B=%d T=%d heads=%d hd=%d theta=%g%s\n", B, T, heads, hd, theta, packed ? " packed" : "");
  size_t n = (size_t)B * T * heads * hd;
  float *x = frand_n(n, 2.0f);
  uint16_t *xh = bf16_round(x, n);
  void *dx = dev_from(xh, n * 2);
  int32_t *pos = packed_pos(B, T, packed);
  int32_t *dpos = pos ? dev_from(pos, (size_t)B * T * sizeof *pos) : NULL;
  eng_k_rope fr;
  eng_rope_table(&(eng_config){.rope_theta = theta, .head_dim = hd}, &fr);
  K_OK(eng_cuda_rope_fwd(dx, dpos, B, T, heads, hd, &fr, st, &err));
  float *ref = malloc(n * 4);
  memcpy(ref, x, n * 4);
  eng_k_rope_fwd(ref, heads * hd, pos, B, T, heads, hd, &fr);
  float *g = dev_bf16_to_host(dx, n);
  // sinf/cosf may differ by an ulp, which can move a rounding by one bf16 step.
  rel_err_f("fwd (1 eps)", g, ref, n, BF16_EPS);
  to_dev(dx, xh, n * 2);
  K_OK(eng_cuda_rope_bwd(dx, dpos, B, T, heads, hd, &fr, st, &err));
  memcpy(ref, x, n * 4);
  eng_k_rope_bwd(ref, heads * hd, pos, B, T, heads, hd, &fr);
  free(g);
  g = dev_bf16_to_host(dx, n);
  rel_err_f("bwd (1 eps)", g, ref, n, BF16_EPS);
  cudaFree(dx), cudaFree(dpos), free(x), free(xh), free(ref), free(g), free(pos);
}

// ---- SwiGLU -----------------------------------------------------------------------

static void check_swiglu(size_t n, int offset) {
  printf("swiglu n=%zu%s\n", n, offset ? " (unaligned: scalar path)" : "");
  float *g = frand_n(n, 8.0f), *u = frand_n(n, 2.0f), *dh = frand_n(n, 1.0f);
  g[0] = 100.0f, g[1] = -100.0f, g[2] = 0.0f;
  uint16_t *gh = bf16_round(g, n), *uh = bf16_round(u, n), *dhh = bf16_round(dh, n);
  char *dg = dev_alloc((n + 8) * 2), *du = dev_alloc((n + 8) * 2), *ddh = dev_alloc((n + 8) * 2);
  char *dH = dev_alloc((n + 8) * 2), *dG = dev_alloc((n + 8) * 2), *dU = dev_alloc((n + 8) * 2);
  size_t o = (size_t)offset * 2;
  to_dev(dg + o, gh, n * 2);
  to_dev(du + o, uh, n * 2);
  to_dev(ddh + o, dhh, n * 2);
  K_OK(eng_cuda_swiglu_fwd((eng_bf16 *)(dH + o), (eng_bf16 *)(dg + o), (eng_bf16 *)(du + o), n, st, &err));
  K_OK(eng_cuda_swiglu_bwd((eng_bf16 *)(dG + o), (eng_bf16 *)(dU + o), (eng_bf16 *)(ddh + o), (eng_bf16 *)(dg + o),
                           (eng_bf16 *)(du + o), n, st, &err));
  float *h = malloc(n * 4), *rg = malloc(n * 4), *ru = malloc(n * 4);
  for (size_t i = 0; i < n; i++) { // the formulas the cpu kernels apply (kmath_hd.h)
    h[i] = eng_km_swiglu(g[i], u[i]);
    eng_km_swiglu_bwd(dh[i], g[i], u[i], &rg[i], &ru[i]);
  }
  uint16_t *gotH = dev_u16(dH + o, n), *gotG = dev_u16(dG + o, n), *gotU = dev_u16(dU + o, n);
  // The same formulas on the same inputs: the rounded cpu value, exactly.
  expect_exact_bf16("h", gotH, h, n);
  expect_exact_bf16("dgate", gotG, rg, n);
  expect_exact_bf16("dup", gotU, ru, n);
  cudaFree(dg), cudaFree(du), cudaFree(ddh), cudaFree(dH), cudaFree(dG), cudaFree(dU);
  free(g), free(u), free(dh), free(gh), free(uh), free(dhh), free(h), free(rg), free(ru), free(gotH), free(gotG);
  free(gotU);
}

// ---- embedding ------------------------------------------------------------------------

static void check_embed(void) {
  const int V = 300, d = 72, n = 257;
  printf("embed V=%d d=%d n=%d (repeated ids)\n", V, d, n);
  float *table = frand_n((size_t)V * d, 1.0f), *dxf = frand_n((size_t)n * d, 1.0f);
  uint16_t *th = bf16_round(table, (size_t)V * d), *dxh = bf16_round(dxf, (size_t)n * d);
  int32_t *ids = malloc(n * 4);
  for (int i = 0; i < n; i++) ids[i] = gpu_irand(17) * 13 % V; // 17 distinct ids, each many times
  void *dT = dev_from(th, (size_t)V * d * 2), *dI = dev_from(ids, n * 4), *dX = dev_alloc((size_t)n * d * 2);
  K_OK(eng_cuda_embed_fwd(dX, dT, dI, n, d, V, st, &err));
  uint16_t *x = dev_u16(dX, (size_t)n * d);
  for (int i = 0; i < n; i++)
    CHECK(!memcmp(x + (size_t)i * d, th + (size_t)ids[i] * d, (size_t)d * 2), "embed fwd row %d is wrong", i);
  printf("  %-34s exact\n", "fwd");
  void *dDX = dev_from(dxh, (size_t)n * d * 2);
  float *dtab = dev_alloc((size_t)V * d * 4);
  K_OK(eng_cuda_embed_bwd(dtab, dDX, dI, n, d, V, st, &err));
  float *ref = calloc((size_t)V * d, 4);
  eng_k_embed_bwd(ref, dxf, ids, n, d);
  float *got = dev_f32_to_host(dtab, (size_t)V * d);
  // fp32 additions in the same row order per column.
  expect_same_f32("bwd (fp32, rows in order)", got, ref, (size_t)V * d);
  cudaFree(dT), cudaFree(dI), cudaFree(dX), cudaFree(dDX), cudaFree(dtab);
  free(table), free(dxf), free(th), free(dxh), free(ids), free(x), free(ref), free(got);
}

// ---- linear ---------------------------------------------------------------------------

static void check_linear(int n, int in, int out) {
  printf("linear n=%d in=%d out=%d\n", n, in, out);
  size_t nx = (size_t)n * in, nw = (size_t)out * in, ny = (size_t)n * out;
  float *x = frand_n(nx, 1.0f), *w = frand_n(nw, 0.2f), *b = frand_n(out, 0.5f), *res = frand_n(ny, 1.0f);
  float *dy = frand_n(ny, 1.0f), *dx0 = frand_n(nx, 1.0f), *dw0 = frand_n(nw, 1.0f), *db0 = frand_n(out, 1.0f);
  uint16_t *xh = bf16_round(x, nx), *wh = bf16_round(w, nw), *bh = bf16_round(b, out), *rh = bf16_round(res, ny);
  uint16_t *dyh = bf16_round(dy, ny), *dx0h = bf16_round(dx0, nx);
  void *dX = dev_from(xh, nx * 2), *dW = dev_from(wh, nw * 2), *dB = dev_from(bh, out * 2), *dR = dev_from(rh, ny * 2);
  void *dY = dev_alloc(ny * 2), *dY2 = dev_alloc(ny * 2);
  K_OK(eng_cuda_linear_fwd(cx, dY, dX, dW, dB, NULL, n, in, out, &err));
  K_OK(eng_cuda_linear_fwd(cx, dY2, dX, dW, NULL, dR, n, in, out, &err));
  double *yb = malloc(ny * 8), *yr = malloc(ny * 8);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < out; j++) {
      double a = 0;
      for (int k = 0; k < in; k++) a += (double)x[(size_t)i * in + k] * w[(size_t)j * in + k];
      yb[(size_t)i * out + j] = a + b[j];
      yr[(size_t)i * out + j] = a + res[(size_t)i * out + j];
    }
  float *g = dev_bf16_to_host(dY, ny), *g2 = dev_bf16_to_host(dY2, ny);
  // fp32 accumulation, then one rounding (two with a bias).
  rel_err("y = x·Wᵀ + b (1 eps)", g, yb, ny, BF16_EPS);
  rel_err("y = x·Wᵀ + res (1 eps)", g2, yr, ny, BF16_EPS);

  void *dDY = dev_from(dyh, ny * 2), *dDX = dev_from(dx0h, nx * 2);
  float *dDW = dev_from(dw0, nw * 4), *dDB = dev_from(db0, out * 4);
  K_OK(eng_cuda_linear_bwd(cx, dDX, dDW, dDB, dDY, dX, dW, n, in, out, 1, &err));
  double *rdx = malloc(nx * 8), *rdw = malloc(nw * 8), *rdb = malloc(out * 8);
  for (int i = 0; i < n; i++)
    for (int k = 0; k < in; k++) {
      double a = dx0[(size_t)i * in + k];
      for (int j = 0; j < out; j++) a += (double)dy[(size_t)i * out + j] * w[(size_t)j * in + k];
      rdx[(size_t)i * in + k] = a;
    }
  for (int j = 0; j < out; j++) {
    double s = db0[j];
    for (int i = 0; i < n; i++) s += dy[(size_t)i * out + j];
    rdb[j] = s;
    for (int k = 0; k < in; k++) {
      double a = dw0[(size_t)j * in + k];
      for (int i = 0; i < n; i++) a += (double)dy[(size_t)i * out + j] * x[(size_t)i * in + k];
      rdw[(size_t)j * in + k] = a;
    }
  }
  float *gdx = dev_bf16_to_host(dDX, nx), *gdw = dev_f32_to_host(dDW, nw), *gdb = dev_f32_to_host(dDB, out);
  rel_err("dx += dy·W (1 eps)", gdx, rdx, nx, BF16_EPS);
  rel_err("dw += dyᵀ·x (fp32, 1e-5)", gdw, rdw, nw, 1e-5);
  rel_err("db += Σ dy (fp32, 1e-6)", gdb, rdb, out, 1e-6);
  cudaFree(dX), cudaFree(dW), cudaFree(dB), cudaFree(dR), cudaFree(dY), cudaFree(dY2), cudaFree(dDY);
  cudaFree(dDX), cudaFree(dDW), cudaFree(dDB);
  free(x), free(w), free(b), free(res), free(dy), free(dx0), free(dw0), free(db0), free(xh), free(wh), free(bh);
  free(rh), free(dyh), free(dx0h), free(yb), free(yr), free(g), free(g2), free(rdx), free(rdw), free(rdb), free(gdx);
  free(gdw), free(gdb);
}

// ---- attention ---------------------------------------------------------------------

static void check_attention(int B, int T, int H, int KV, int hd, int packed) {
  printf("attention B=%d T=%d H=%d KV=%d hd=%d%s\n", B, T, H, KV, hd, packed ? " packed" : "");
  int32_t *pos = packed_pos(B, T, packed);
  int32_t *dpos = pos ? dev_from(pos, (size_t)B * T * sizeof *pos) : NULL;
  size_t nq = (size_t)B * T * H * hd, nk = (size_t)B * T * KV * hd, nl = (size_t)B * H * T;
  float *q = frand_n(nq, 1.0f), *k = frand_n(nk, 1.0f), *v = frand_n(nk, 1.0f), *dout = frand_n(nq, 1.0f);
  uint16_t *qh = bf16_round(q, nq), *kh = bf16_round(k, nk), *vh = bf16_round(v, nk), *doh = bf16_round(dout, nq);
  void *dQ = dev_from(qh, nq * 2), *dK = dev_from(kh, nk * 2), *dV = dev_from(vh, nk * 2), *dO = dev_alloc(nq * 2);
  float *dL = dev_alloc(nl * 4);
  K_OK(eng_cuda_attention_fwd(dO, dL, dQ, dK, dV, dpos, B, T, H, KV, hd, st, &err));
  float *ro = malloc(nq * 4), *rl = malloc(nl * 4);
  eng_k_attention_fwd(ro, rl, q, H * hd, k, KV * hd, v, KV * hd, pos, B, T, H, KV, hd, 0);
  float *go = dev_bf16_to_host(dO, nq), *gl = dev_f32_to_host(dL, nl);
  // P is rounded to bf16 before P·V (half an eps per term), then the output.
  rel_err_f("out (2 eps)", go, ro, nq, 2 * BF16_EPS);
  rel_err_f("lse (fp32, 1e-5)", gl, rl, nl, 1e-5);

  void *dDO = dev_from(doh, nq * 2), *dDQ = dev_alloc(nq * 2), *dDK = dev_alloc(nk * 2), *dDV = dev_alloc(nk * 2);
  void *scratch = dev_alloc(eng_cuda_attention_bwd_scratch_bytes(B, T, H));
  K_OK(eng_cuda_attention_bwd(dDQ, dDK, dDV, dDO, dO, dL, dQ, dK, dV, dpos, B, T, H, KV, hd, scratch, st, &err));
  // The cpu backward from the GPU's own out and lse, so only the backward differs.
  float *rq = malloc(nq * 4), *rk = malloc(nk * 4), *rv = malloc(nk * 4);
  eng_k_attention_bwd(rq, rk, rv, dout, go, gl, q, H * hd, k, KV * hd, v, KV * hd, pos, B, T, H, KV, hd, 0);
  float *gq = dev_bf16_to_host(dDQ, nq), *gk = dev_bf16_to_host(dDK, nk), *gv = dev_bf16_to_host(dDV, nk);
  // P and dS are rounded to bf16 before their products.
  rel_err_f("dq (4 eps)", gq, rq, nq, 4 * BF16_EPS);
  rel_err_f("dk (4 eps)", gk, rk, nk, 4 * BF16_EPS);
  rel_err_f("dv (4 eps)", gv, rv, nk, 4 * BF16_EPS);
  // No atomics: a second run gives the same bits.
  K_OK(eng_cuda_attention_bwd(dDQ, dDK, dDV, dDO, dO, dL, dQ, dK, dV, dpos, B, T, H, KV, hd, scratch, st, &err));
  float *gk2 = dev_bf16_to_host(dDK, nk);
  expect_same_f32("dk again", gk2, gk, nk);
  cudaFree(dQ), cudaFree(dK), cudaFree(dV), cudaFree(dO), cudaFree(dL), cudaFree(dDO), cudaFree(dDQ);
  cudaFree(dDK), cudaFree(dDV), cudaFree(scratch), cudaFree(dpos);
  free(q), free(k), free(v), free(dout), free(qh), free(kh), free(vh), free(doh), free(ro), free(rl), free(go);
  free(gl), free(rq), free(rk), free(rv), free(gq), free(gk), free(gv), free(gk2), free(pos);
}

// ---- head loss ------------------------------------------------------------------------

static void check_head_loss(int n, int d, int V) {
  printf("head loss n=%d d=%d V=%d\n", n, d, V);
  size_t nh = (size_t)n * d, nw = (size_t)V * d;
  float *h = frand_n(nh, 1.0f), *w = frand_n(nw, 0.5f);
  uint16_t *hh = bf16_round(h, nh), *wh = bf16_round(w, nw);
  int32_t *t = malloc(n * 4);
  int count = 0;
  for (int i = 0; i < n; i++) {
    t[i] = i % 7 == 3 ? -1 : gpu_irand(V);
    count += t[i] >= 0;
  }
  const float gs = 1.0f / (float)count;
  void *dH = dev_from(hh, nh * 2), *dWt = dev_from(wh, nw * 2), *dT = dev_from(t, n * 4), *dDH = dev_alloc(nh * 2);
  float *dDW = dev_alloc(nw * 4), *dLg = dev_alloc((size_t)n * V * 4);
  double *dLoss = dev_alloc(8);
  void *scratch = dev_alloc(eng_cuda_head_loss_scratch_bytes(V));
  K_OK(eng_cuda_head_loss(cx, dDH, dDW, dLg, dLoss, dH, dWt, dT, n, d, V, gs, scratch, &err));

  double *lg = malloc((size_t)n * V * 8), *rdh = calloc(nh, 8), *rdw = calloc(nw, 8), loss = 0;
  for (int i = 0; i < n; i++) {
    double mx = -INFINITY, s = 0;
    for (int j = 0; j < V; j++) {
      double a = 0;
      for (int k = 0; k < d; k++) a += (double)h[(size_t)i * d + k] * w[(size_t)j * d + k];
      lg[(size_t)i * V + j] = a;
      mx = a > mx ? a : mx;
    }
    if (t[i] < 0) continue;
    for (int j = 0; j < V; j++) s += exp(lg[(size_t)i * V + j] - mx);
    loss += mx + log(s) - lg[(size_t)i * V + t[i]];
    for (int j = 0; j < V; j++) {
      double g = (exp(lg[(size_t)i * V + j] - mx) / s - (j == t[i])) * gs;
      for (int k = 0; k < d; k++) {
        rdh[(size_t)i * d + k] += g * w[(size_t)j * d + k];
        rdw[(size_t)j * d + k] += g * h[(size_t)i * d + k];
      }
    }
  }
  double got_loss;
  host_from(&got_loss, dLoss, 8);
  float *glg = dev_f32_to_host(dLg, (size_t)n * V), *gdh = dev_bf16_to_host(dDH, nh), *gdw = dev_f32_to_host(dDW, nw);
  printf("  %-34s %.9f vs %.9f\n", "loss sum", got_loss, loss);
  CHECK(fabs(got_loss - loss) <= 1e-5 * fabs(loss), "loss sum %.9f vs reference %.9f", got_loss, loss);
  rel_err("logits (fp32, 1e-5)", glg, lg, (size_t)n * V, 1e-5);
  // dlogits are rounded to bf16 before both products.
  rel_err("dh (2 eps)", gdh, rdh, nh, 2 * BF16_EPS);
  rel_err("dw (2 eps)", gdw, rdw, nw, 2 * BF16_EPS);

  // The rows split over two calls accumulate the same loss and dw.
  double *dLoss2 = dev_alloc(8);
  float *dDW2 = dev_alloc(nw * 4);
  int half = n / 2;
  K_OK(eng_cuda_head_loss(cx, dDH, dDW2, NULL, dLoss2, dH, dWt, dT, half, d, V, gs, scratch, &err));
  K_OK(eng_cuda_head_loss(cx, (eng_bf16 *)dDH + (size_t)half * d, dDW2, NULL, dLoss2,
                          (const eng_bf16 *)dH + (size_t)half * d, dWt, (const int32_t *)dT + half, n - half, d, V,
                          gs, scratch, &err));
  double got2;
  host_from(&got2, dLoss2, 8);
  float *gdw2 = dev_f32_to_host(dDW2, nw);
  CHECK(fabs(got2 - got_loss) <= 1e-9 * fabs(loss), "split calls: loss %.12f vs %.12f", got2, got_loss);
  rel_err_f("dw over two calls (fp32, 1e-6)", gdw2, gdw, nw, 1e-6);
  cudaFree(dH), cudaFree(dWt), cudaFree(dT), cudaFree(dDH), cudaFree(dDW), cudaFree(dLg), cudaFree(dLoss);
  cudaFree(scratch), cudaFree(dLoss2), cudaFree(dDW2);
  free(h), free(w), free(hh), free(wh), free(t), free(lg), free(rdh), free(rdw), free(glg), free(gdh), free(gdw);
  free(gdw2);
}

// ---- gradient finish ------------------------------------------------------------------

static void check_grad_finish(size_t n) {
  printf("grad finish n=%zu\n", n);
  float *g = frand_n(n, 1.0f);
  for (size_t i = 0; i < n; i++) g[i] *= (float)(i % 97 == 0 ? 1e4 : i % 13 == 0 ? 1e-5 : 1.0);
  float *dg = dev_from(g, n * 4);
  uint16_t *dout = dev_alloc(n * 2);
  double *dsum = dev_alloc(8), sum;
  void *scratch = dev_alloc(eng_cuda_grad_finish_scratch_bytes(n));
  K_OK(eng_cuda_grad_finish(dout, dsum, dg, n, scratch, st, &err));
  uint16_t *out = dev_u16(dout, n);
  host_from(&sum, dsum, 8);
  for (size_t i = 0; i < n; i++)
    CHECK(out[i] == eng_bf16_from_f32(g[i]), "element %zu rounds to %#06x, the host gives %#06x", i, out[i],
          eng_bf16_from_f32(g[i]));
  double want = eng_bf16_sumsq(out, n);
  CHECK(!memcmp(&sum, &want, 8), "bf16 Σg² %.17g, the host's eng_bf16_sumsq %.17g", sum, want);
  printf("  %-34s exact (%.6g)\n", "bf16 values and Σg²", sum);
  K_OK(eng_cuda_grad_finish(NULL, dsum, dg, n, scratch, st, &err));
  host_from(&sum, dsum, 8);
  want = eng_k_sumsq(g, n);
  CHECK(!memcmp(&sum, &want, 8), "fp32 Σg² %.17g, the host's eng_k_sumsq %.17g", sum, want);
  printf("  %-34s exact (%.6g)\n", "fp32 Σg²", sum);
  cudaFree(dg), cudaFree(dout), cudaFree(dsum), cudaFree(scratch), free(g), free(out);
}

int main(void) {
  gpu_require("test_gpu_kernels");
  CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  K_OK(eng_cuda_ctx_open(&cx, st, &err));
  check_convert();
  check_rmsnorm_shape(150, 200);
  check_rmsnorm_shape(2 * 77 * 4, 64); // the per-head q norm of Qwen3
  check_rope(2, 77, 4, 64, 10000.0f, 0);
  check_rope(1, 300, 2, 128, 1e6f, 0);
  check_rope(2, 300, 3, 64, 10000.0f, 1);
  check_swiglu(100003, 0);
  check_swiglu(1001, 1);
  check_embed();
  check_linear(150, 96, 80);
  check_linear(77, 64, 176);
  check_attention(2, 77, 4, 2, 64, 0);
  check_attention(1, 130, 4, 1, 128, 0);
  check_attention(2, 64, 2, 2, 16, 0);
  check_attention(3, 333, 4, 2, 64, 1);
  check_head_loss(150, 64, 1000);
  check_grad_finish(3 * 4096 + 123);
  check_grad_finish(1000003);
  K_OK(eng_cuda_stream_sync(st, &err));
  eng_cuda_ctx_close(cx);
  cudaStreamDestroy(st);
  printf("gpu kernels: ok\n");
  return 0;
}

#endif
