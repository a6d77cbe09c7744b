// Per-element math shared by the cpu kernels (kernels/cpu, C) and the cuda
// kernels (kernels/cuda, nvcc): one definition of each formula, compiled for
// the host and the device, so the host-side unit tests exercise the exact
// arithmetic the GPU runs (tests/unit/test_kmath_hd.c).
//
// Both compilers keep every rounding as written: C builds with
// -ffp-contract=off and nvcc with --fmad=false, division and sqrt are IEEE
// on both (nvcc's default -prec-div/-prec-sqrt), and a fused multiply-add
// appears only where written as fmaf. Hence a function of plain arithmetic
// gives the same bits on host and device for the same inputs. Calls into
// libm (powf, logf, log, cosf, sinf) may differ in the last ulp between
// glibc and CUDA's math library; each such use says so.
#ifndef ENG_KERNELS_KMATH_HD_H
#define ENG_KERNELS_KMATH_HD_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define TRAIND_HD __host__ __device__
#else
#define TRAIND_HD
#endif

// ---- bits and bf16 ----------------------------------------------------------

static inline TRAIND_HD uint32_t eng_km_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static inline TRAIND_HD float eng_km_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

// bf16 is the upper half of an fp32: widening is exact.
static inline TRAIND_HD float eng_km_bf16_to_f32(uint16_t h) { return eng_km_from_bits((uint32_t)h << 16); }

// Round to nearest, ties to even (add just under half an ulp plus the lowest
// kept bit); a NaN keeps its sign and becomes the quiet NaN, since the add
// could carry its payload into the exponent. Subnormals round like any value
// (no flush to zero). The same rule as common/bf16.h, which the host stores use.
static inline TRAIND_HD uint16_t eng_km_bf16_from_f32(float f) {
  uint32_t u = eng_km_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// ---- exp ----------------------------------------------------------------------

// exp(x) in float, within 2 ulp of the exact value on [-87, 88]; 0 below
// that range, +inf above, NaN in, NaN out. Plain arithmetic, so the cpu
// compiler vectorises it (libm's expf is a scalar call) and the device
// computes the same bits as the host. Method: x = n·ln2 + r, |r| <= ln2/2,
// exp(r) by its Taylor series to degree 7 (truncation error < 5e-9), 2^n
// written into the exponent bits.
static inline TRAIND_HD float eng_km_expf(float x) {
  const float lo = -87.0f, hi = 88.0f;
  float xc = x < lo ? lo : x;
  xc = xc > hi ? hi : xc;
  // Adding 1.5·2^23 rounds to the nearest integer and leaves it in the low
  // mantissa bits, so n needs no float-to-int conversion.
  const float shift = 12582912.0f;
  float t = xc * 1.44269504088896341f + shift;
  float nf = t - shift;
  uint32_t n = eng_km_bits(t) - 0x4B400000u; // two's complement of the integer n
  // ln2 split so that nf·ln2_hi is exact (ln2_hi has 16 significant bits).
  float r = fmaf(nf, -0.693145751953125f, xc);
  r = fmaf(nf, -1.428606765330187e-6f, r);
  float p = 1.0f / 5040.0f;
  p = fmaf(p, r, 1.0f / 720.0f);
  p = fmaf(p, r, 1.0f / 120.0f);
  p = fmaf(p, r, 1.0f / 24.0f);
  p = fmaf(p, r, 1.0f / 6.0f);
  p = fmaf(p, r, 0.5f);
  p = fmaf(p, r, 1.0f);
  p = fmaf(p, r, 1.0f);
  float s = eng_km_from_bits((n + 127u) << 23);
  float y = p * s;
  y = x < lo ? 0.0f : y;
  y = x > hi ? INFINITY : y;
  return x != x ? x : y;
}

// ---- sums -----------------------------------------------------------------------

// The fixed tree that combines 8 interleaved partial sums (lane l holds the
// elements l, l+8, l+16, ...), used by every Σx² of the engine (row norms,
// gradient norms): the same tree on every path gives the same bits.
static inline TRAIND_HD double eng_km_sum8_tree(const double acc[8]) {
  return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

// ---- RMSNorm (transformers: variance in fp32, the weight multiplies last) -----

// 1/sqrt(mean(x²) + eps) from the row's Σx² taken in double: the mean is
// rounded once to fp32, so it is the fp32 value of the exact mean whatever
// order the squares were added in (up to double rounding).
static inline TRAIND_HD float eng_km_rms_rstd(double sumsq, int d, float eps) {
  float var = (float)(sumsq / d);
  return 1.0f / sqrtf(var + eps);
}

// 1/sqrt(Σx² + eps): the L2 norm of Gated DeltaNet's q and k (FLA's l2norm,
// as transformers writes it), from Σx² in double.
static inline TRAIND_HD float eng_km_l2_rstd(double sumsq, float eps) { return 1.0f / sqrtf((float)sumsq + eps); }

// y = (x · rstd) · w
static inline TRAIND_HD float eng_km_rms_y(float x, float r, float w) { return (x * r) * w; }

// One addend of Σ_j dxhat_j · xhat_j, with dxhat = dy·w and xhat = x·r, in double.
static inline TRAIND_HD double eng_km_rms_dot_term(float dy, float w, float x, float r) {
  return (double)(dy * w) * (double)(x * r);
}

// c = mean(dxhat∘xhat), from the row's Σ of eng_km_rms_dot_term.
static inline TRAIND_HD float eng_km_rms_c(double dot, int d) { return (float)(dot / d); }

// dx = r·(dxhat − xhat·c): the chain rule through xhat = x·r and
// r = (mean(x²) + eps)^(-1/2).
static inline TRAIND_HD float eng_km_rms_dx(float dy, float w, float x, float r, float c) {
  return r * (dy * w - (x * r) * c);
}

// One addend of dw_j = Σ_rows dy·xhat, in double.
static inline TRAIND_HD double eng_km_rms_dw_term(float dy, float x, float r) { return (double)(dy * (x * r)); }

// ---- RoPE (rotate-half: pairs (i, i + hd/2)) --------------------------------

// inv_freq_i = 1 / theta^(2i/hd), in fp32 as transformers computes it. powf
// may differ by an ulp between glibc and the device.
static inline TRAIND_HD float eng_km_rope_inv_freq(int i, int hd, float theta) {
  return 1.0f / powf(theta, (float)(2 * i) / (float)hd);
}

// The angle of pair i at position pos (cos/sin of it are libm's).
static inline TRAIND_HD float eng_km_rope_angle(int pos, float inv_freq) { return (float)pos * inv_freq; }

// The rotated pair (u, v) -> (u·c − v·s, v·c + u·s); s = −sin gives the
// inverse rotation, which is the backward.
static inline TRAIND_HD float eng_km_rope_lo(float u, float v, float c, float s) { return u * c - v * s; }
static inline TRAIND_HD float eng_km_rope_hi(float u, float v, float c, float s) { return v * c + u * s; }

// ---- online softmax (attention) ------------------------------------------------
// A row's state is (m, l): the running max of the scores seen and
// Σ exp(s − m) over them. Folding in a block of scores whose max is bm:
// m' = osm_max(m, bm); everything weighted by exp(s − m) so far (l and the
// output accumulator) scales by alpha = osm_alpha(m, m'); each new score
// weighs p = osm_p(s, m'); l' = osm_sum(l, alpha, Σ p). At the end
// out = acc / l and lse = osm_lse(m, l).

static inline TRAIND_HD float eng_km_osm_max(float m, float s) { return s > m ? s : m; }
static inline TRAIND_HD float eng_km_osm_alpha(float m_old, float m_new) { return eng_km_expf(m_old - m_new); }
static inline TRAIND_HD float eng_km_osm_p(float s, float m) { return eng_km_expf(s - m); }
static inline TRAIND_HD float eng_km_osm_sum(float l, float alpha, float block_sum) { return l * alpha + block_sum; }
// logf may differ by an ulp between glibc and the device.
static inline TRAIND_HD float eng_km_osm_lse(float m, float l) { return m + logf(l); }

// The backward recomputes the probability from the raw dot product s = q·k,
// the softmax scale and the saved lse, and forms dS = P∘(dP − D)·scale with
// D = rowsum(dO∘O) (FlashAttention-2).
static inline TRAIND_HD float eng_km_attn_p(float s, float scale, float lse) { return eng_km_expf(s * scale - lse); }
static inline TRAIND_HD float eng_km_attn_ds(float p, float dp, float D, float scale) { return (p * (dp - D)) * scale; }

// ---- cross-entropy ---------------------------------------------------------------
// A row's log-sum-exp as a pair (m, s): a max and Σ exp(x − m) in double.
// Partial pairs over parts of the row combine in any tree; the tree fixes
// the rounding.

// Folds the pair (m2, s2) into (*m, *s). An empty pair is (-inf, 0).
static inline TRAIND_HD void eng_km_lse_combine(float *m, double *s, float m2, double s2) {
  float mn = m2 > *m ? m2 : *m;
  double a = *m == mn ? *s : *s * (double)eng_km_expf(*m - mn);
  double b = m2 == mn ? s2 : s2 * (double)eng_km_expf(m2 - mn);
  *s = a + b;
  *m = mn;
}

// Folds one logit x into (*m, *s).
static inline TRAIND_HD void eng_km_lse_add(float *m, double *s, float x) {
  if (x > *m) {
    *s = *s * (double)eng_km_expf(*m - x) + 1.0;
    *m = x;
  } else {
    *s += (double)eng_km_expf(x - *m);
  }
}

// Cross-entropy of a row: lse − x_target = m + log(s) − x_target (log is
// libm's, in double).
static inline TRAIND_HD double eng_km_ce_loss(float m, double s, float x_target) {
  return (double)m + log(s) - (double)x_target;
}

// 1/Σ as the float that scales every exp of the row.
static inline TRAIND_HD float eng_km_ce_inv(double s) { return (float)(1.0 / s); }

// d loss/d logit of one logit whose exp(x − m) is e: grad_scale·(softmax −
// onehot).
static inline TRAIND_HD float eng_km_ce_dlogit(float e, float inv, int is_target, float grad_scale) {
  float p = e * inv;
  return (is_target ? p - 1.0f : p) * grad_scale;
}

// ---- SiLU and SwiGLU (torch's silu and silu_backward) ----------------------------

// sigmoid(x) = 1/(1 + e^−x)
static inline TRAIND_HD float eng_km_sigmoid(float x) { return 1.0f / (1.0f + eng_km_expf(-x)); }

// softplus(x) = log(1 + e^x), x past 20 as itself (torch's threshold)
static inline TRAIND_HD float eng_km_softplus(float x) { return x > 20.0f ? x : log1pf(eng_km_expf(x)); }

// silu(x) = x/(1 + e^−x)
static inline TRAIND_HD float eng_km_silu(float x) { return x / (1.0f + eng_km_expf(-x)); }

// dx = dy·s·(1 + x·(1 − s)), s = 1/(1 + e^−x)
static inline TRAIND_HD float eng_km_silu_bwd(float dy, float x) {
  float s = 1.0f / (1.0f + eng_km_expf(-x));
  return (dy * s) * (1.0f + x * (1.0f - s));
}

// h = silu(g)·u, silu(g) = g/(1 + e^−g)
static inline TRAIND_HD float eng_km_swiglu(float g, float u) { return (g / (1.0f + eng_km_expf(-g))) * u; }

// dgate = (dh·u)·s·(1 + g·(1 − s)), dup = dh·silu(g), s = 1/(1 + e^−g)
static inline TRAIND_HD void eng_km_swiglu_bwd(float dh, float g, float u, float *dgate, float *dup) {
  float e = 1.0f + eng_km_expf(-g);
  float s = 1.0f / e;
  *dup = dh * (g / e);
  *dgate = ((dh * u) * s) * (1.0f + g * (1.0f - s));
}

#endif
