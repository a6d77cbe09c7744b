#include "exec/layer_dn.h"

#include <string.h>

#include "kernels/cpu/kmath.h"
#include "kernels/kernels.h"

#define W(p) (w + proto[p].off)
#define DW(p) (dw + proto[p].off)

// The widths of a DN layer: q and k (kt each), v and z (vt each), the conv's
// channels (q|k|v) and the whole input projection (q|k|v|z|b|a).
typedef struct dims {
  size_t n, d, ff, kt, vt, hv, cq, pw;
} dims;

static dims dims_of(const eng_config *c, int B, int T) {
  dims m = {(size_t)B * T, (size_t)c->d_model, (size_t)c->d_ff, (size_t)c->dn.k_heads * c->dn.k_dim,
            (size_t)c->dn.v_heads * c->dn.v_dim, (size_t)c->dn.v_heads, 0, 0};
  m.cq = 2 * m.kt + m.vt;
  m.pw = m.cq + m.vt + 2 * m.hv;
  return m;
}

static float *take(float **p, size_t n) {
  float *r = *p;
  *p += n;
  return r;
}

// One function both sizes (buf NULL) and binds the acts.
static size_t acts_carve(eng_dn_acts *a, float *buf, const eng_config *c, int B, int T) {
  dims m = dims_of(c, B, T);
  eng_dn_acts tmp;
  if (!a) a = &tmp;
  float *p = buf, *p0 = buf;
  a->w1 = take(&p, m.d), a->w2 = take(&p, m.d);
  a->xn1 = take(&p, m.n * m.d), a->rstd1 = take(&p, m.n);
  a->p = take(&p, m.n * m.pw);
  a->u = take(&p, m.n * m.cq), a->cy = take(&p, m.n * m.cq);
  a->qn = take(&p, m.n * m.kt), a->kn = take(&p, m.n * m.kt);
  a->rq = take(&p, m.n * c->dn.k_heads), a->rk = take(&p, m.n * c->dn.k_heads);
  a->g = take(&p, m.n * m.hv), a->beta = take(&p, m.n * m.hv);
  a->states = take(&p, eng_k_deltarule_states_floats(B, T, c->dn.v_heads, c->dn.k_dim, c->dn.v_dim));
  a->o = take(&p, m.n * m.vt), a->rn = take(&p, m.n * m.hv), a->gn = take(&p, m.n * m.vt);
  a->xmid = take(&p, m.n * m.d), a->xn2 = take(&p, m.n * m.d), a->rstd2 = take(&p, m.n);
  a->gu = take(&p, m.n * 2 * m.ff), a->hact = take(&p, m.n * m.ff);
  return (size_t)(p - p0);
}

static size_t scratch_carve(eng_dn_scratch *s, float *buf, const eng_config *c, int B, int T) {
  dims m = dims_of(c, B, T);
  eng_dn_scratch tmp;
  if (!s) s = &tmp;
  float *p = buf, *p0 = buf;
  s->dh = take(&p, m.n * m.ff), s->dgu = take(&p, m.n * 2 * m.ff);
  s->dxn = take(&p, m.n * m.d), s->dxmid = take(&p, m.n * m.d);
  s->dgn = take(&p, m.n * m.vt), s->dout = take(&p, m.n * m.vt), s->dnorm = take(&p, m.n * m.vt);
  s->dqn = take(&p, m.n * m.kt), s->dkn = take(&p, m.n * m.kt), s->dcy = take(&p, m.n * m.cq);
  s->dg = take(&p, m.n * m.hv), s->dbeta = take(&p, m.n * m.hv);
  s->dp = take(&p, m.n * m.pw);
  return (size_t)(p - p0);
}

size_t eng_dn_acts_floats(const eng_config *c, int B, int T) { return acts_carve(NULL, NULL, c, B, T); }
size_t eng_dn_scratch_floats(const eng_config *c, int B, int T) { return scratch_carve(NULL, NULL, c, B, T); }
void eng_dn_acts_bind(eng_dn_acts *a, float *buf, const eng_config *c, int B, int T) { acts_carve(a, buf, c, B, T); }
void eng_dn_scratch_bind(eng_dn_scratch *s, float *buf, const eng_config *c, int B, int T) {
  scratch_carve(s, buf, c, B, T);
}

void eng_dn_layer_fwd(const eng_config *c, const eng_tensor *proto, const float *w, const float *x, float *y,
                      const int32_t *pos, int B, int T, eng_dn_acts *a) {
  const dims m = dims_of(c, B, T);
  const int n = (int)m.n, d = (int)m.d, ff = (int)m.ff, hk = c->dn.k_heads, hv = c->dn.v_heads;
  const int kd = c->dn.k_dim, vd = c->dn.v_dim;
  const float eps = c->rms_eps;
  // Zero-centred norms: x̂·(1 + w), the same bits as the plain norm given 1 + w.
  for (int j = 0; j < d; j++) a->w1[j] = 1.0f + W(ENG_P_ATTN_NORM)[j], a->w2[j] = 1.0f + W(ENG_P_MLP_NORM)[j];

  eng_k_rmsnorm_fwd(a->xn1, a->rstd1, x, a->w1, n, d, eps);
  // q|k|v, z, b and a as one product: the layout stacks their weights.
  eng_k_linear_fwd(a->p, a->xn1, W(ENG_P_DN_QKV), NULL, n, d, (int)m.pw);
  eng_k_conv_silu_fwd(a->cy, a->u, a->p, (int)m.pw, W(ENG_P_DN_CONV), pos, B, T, (int)m.cq, c->dn.conv);
  eng_k_l2norm_fwd(a->qn, (int)m.kt, a->rq, a->cy, (int)m.cq, n, hk, kd, 1e-6f);
  eng_k_l2norm_fwd(a->kn, (int)m.kt, a->rk, a->cy + m.kt, (int)m.cq, n, hk, kd, 1e-6f);
  const float *dt = W(ENG_P_DN_DT), *alog = W(ENG_P_DN_ALOG);
  for (size_t i = 0; i < m.n; i++) {
    const float *bi = a->p + i * m.pw + m.cq + m.vt, *ai = bi + m.hv;
    for (int h = 0; h < hv; h++) {
      a->beta[i * m.hv + h] = eng_km_sigmoid(bi[h]);
      a->g[i * m.hv + h] = -eng_km_expf(alog[h]) * eng_km_softplus(ai[h] + dt[h]);
    }
  }
  eng_k_deltarule_fwd(a->o, a->states, a->qn, (int)m.kt, a->kn, (int)m.kt, a->cy + 2 * m.kt, (int)m.cq, a->g,
                      a->beta, hv, pos, B, T, hk, hv, kd, vd);
  eng_k_gatednorm_fwd(a->gn, a->rn, a->o, a->p + m.cq, (int)m.pw, W(ENG_P_DN_NORM), n, hv, vd, eps);
  eng_k_linear_fwd(y, a->gn, W(ENG_P_DN_OUT), NULL, n, (int)m.vt, d);
  for (size_t i = 0; i < m.n * m.d; i++) a->xmid[i] = x[i] + y[i];

  eng_k_rmsnorm_fwd(a->xn2, a->rstd2, a->xmid, a->w2, n, d, eps);
  eng_k_linear_fwd(a->gu, a->xn2, W(ENG_P_WGATE), NULL, n, d, 2 * ff);
  eng_k_swiglu_fwd(a->hact, a->gu, n, ff);
  eng_k_linear_fwd(y, a->hact, W(ENG_P_WDOWN), NULL, n, ff, d);
  for (size_t i = 0; i < m.n * m.d; i++) y[i] = y[i] + a->xmid[i];
}

void eng_dn_layer_bwd(const eng_config *c, const eng_tensor *proto, const float *w, float *dw, const float *x,
                      const eng_dn_acts *a, const float *dy, float *dx, const int32_t *pos, int B, int T,
                      eng_dn_scratch *s) {
  const dims m = dims_of(c, B, T);
  const int n = (int)m.n, d = (int)m.d, ff = (int)m.ff, hk = c->dn.k_heads, hv = c->dn.v_heads;
  const int kd = c->dn.k_dim, vd = c->dn.v_dim;

  // MLP: y = xmid + down(silu(gate)·up), gate/up = proj(norm2(xmid)).
  eng_k_linear_bwd(s->dh, DW(ENG_P_WDOWN), NULL, dy, a->hact, W(ENG_P_WDOWN), n, ff, d, 0);
  eng_k_swiglu_bwd(s->dgu, s->dh, a->gu, n, ff);
  eng_k_linear_bwd(s->dxn, DW(ENG_P_WGATE), NULL, s->dgu, a->xn2, W(ENG_P_WGATE), n, d, 2 * ff, 0);
  eng_k_rmsnorm_bwd(s->dxmid, DW(ENG_P_MLP_NORM), s->dxn, dy, a->xmid, a->w2, a->rstd2, n, d);

  // Mixer, from the output projection back.
  eng_k_linear_bwd(s->dgn, DW(ENG_P_DN_OUT), NULL, s->dxmid, a->gn, W(ENG_P_DN_OUT), n, (int)m.vt, d, 0);
  eng_k_gatednorm_bwd(s->dout, DW(ENG_P_DN_NORM), s->dp + m.cq, (int)m.pw, s->dnorm, s->dgn, a->o, a->p + m.cq,
                      (int)m.pw, W(ENG_P_DN_NORM), a->rn, n, hv, vd);
  eng_k_deltarule_bwd(s->dqn, s->dkn, s->dcy + 2 * m.kt, s->dg, s->dbeta, hv, s->dout, a->states, a->qn, (int)m.kt,
                      a->kn, (int)m.kt, a->cy + 2 * m.kt, (int)m.cq, a->g, a->beta, hv, pos, B, T, hk, hv, kd, vd);
  eng_k_l2norm_bwd(s->dcy, (int)m.cq, s->dqn, (int)m.kt, a->cy, (int)m.cq, a->rq, n, hk, kd);
  eng_k_l2norm_bwd(s->dcy + m.kt, (int)m.cq, s->dkn, (int)m.kt, a->cy + m.kt, (int)m.cq, a->rk, n, hk, kd);
  // β = sigmoid(b); g = −exp(A_log)·softplus(a + dt_bias): db and da into the
  // projection's gradient, dA_log and ddt_bias summed over rows in row order.
  const float *dt = W(ENG_P_DN_DT), *alog = W(ENG_P_DN_ALOG);
  double sum_dt[ENG_K_DN_MAX_V_HEADS] = {0}, sum_alog[ENG_K_DN_MAX_V_HEADS] = {0};
  for (size_t i = 0; i < m.n; i++) {
    const float *ai = a->p + i * m.pw + m.cq + m.vt + m.hv;
    float *dbi = s->dp + i * m.pw + m.cq + m.vt, *dai = dbi + m.hv;
    for (int h = 0; h < hv; h++) {
      const size_t k = i * m.hv + h;
      const float bt = a->beta[k], dg = s->dg[k], x1 = ai[h] + dt[h];
      dbi[h] = (s->dbeta[k] * bt) * (1.0f - bt);
      dai[h] = (dg * -eng_km_expf(alog[h])) * (x1 > 20.0f ? 1.0f : eng_km_sigmoid(x1));
      sum_dt[h] += dai[h];
      sum_alog[h] += (double)(dg * a->g[k]);
    }
  }
  for (int h = 0; h < hv; h++) DW(ENG_P_DN_DT)[h] += (float)sum_dt[h], DW(ENG_P_DN_ALOG)[h] += (float)sum_alog[h];
  eng_k_conv_silu_bwd(s->dp, (int)m.pw, DW(ENG_P_DN_CONV), s->dcy, a->u, a->p, (int)m.pw, W(ENG_P_DN_CONV), pos, B, T,
                      (int)m.cq, c->dn.conv);
  eng_k_linear_bwd(s->dxn, DW(ENG_P_DN_QKV), NULL, s->dp, a->xn1, W(ENG_P_DN_QKV), n, d, (int)m.pw, 0);
  eng_k_rmsnorm_bwd(dx, DW(ENG_P_ATTN_NORM), s->dxn, s->dxmid, x, a->w1, a->rstd1, n, d);
}
