#include "exec/layer.h"

#include <string.h>

#include "kernels/kernels.h"
#include "model/rope.h"
#include "poet/state.h"

#define W(p) (lo->layer_proto[p].numel ? w + lo->layer_proto[p].off : NULL)
#define DW(p) (lo->layer_proto[p].numel ? dw + lo->layer_proto[p].off : NULL)

// q_proj's width: each head's query, and its gate where the model has one.
static size_t q_width(const eng_config *c) { return (size_t)c->n_heads * c->head_dim * (1 + (c->attn_gate != 0)); }
// The model's RoPE table (a few dozen floats: made per call).
static eng_k_rope rope_of(const eng_config *c) {
  eng_k_rope r;
  eng_rope_table(c, &r);
  return r;
}

size_t eng_layer_acts_floats(const eng_config *c, int B, int T) {
  size_t n = (size_t)B * T, d = c->d_model, qd = (size_t)c->n_heads * c->head_dim, qw = q_width(c);
  size_t kvd = (size_t)c->n_kv_heads * c->head_dim, ff = c->d_ff;
  size_t qk = c->qk_norm ? n * (qd + kvd) + n * (c->n_heads + c->n_kv_heads) : 0;
  size_t gate = c->attn_gate ? n * qd : 0;
  size_t plus_one = c->norm_plus_one ? 2 * d + 2 * (size_t)c->head_dim : 0;
  return n * d * 3 + n * 2 + n * (qw + 2 * kvd) + qk + n * qd + gate + (size_t)B * c->n_heads * T + n * ff * 3 +
         plus_one;
}

size_t eng_layer_acts_z_floats(const eng_config *c, int B, int T) {
  size_t n = (size_t)B * T, kvd = (size_t)c->n_kv_heads * c->head_dim;
  return n * (q_width(c) + 2 * kvd + 2 * (size_t)c->d_model + 2 * (size_t)c->d_ff);
}

size_t eng_layer_scratch_floats(const eng_config *c, int B, int T) {
  size_t n = (size_t)B * T, d = c->d_model, qd = (size_t)c->n_heads * c->head_dim;
  size_t kvd = (size_t)c->n_kv_heads * c->head_dim;
  size_t qk = c->qk_norm ? n * (qd + kvd) : 0;
  return n * c->d_ff * 3 + n * d * 2 + n * qd + n * (q_width(c) + 2 * kvd) + qk;
}

static float *take(float **p, size_t n) {
  float *r = *p;
  *p += n;
  return r;
}

void eng_layer_acts_bind(eng_layer_acts *a, float *p, const eng_config *c, int B, int T) {
  size_t n = (size_t)B * T, d = c->d_model, qd = (size_t)c->n_heads * c->head_dim, qw = q_width(c);
  size_t kvd = (size_t)c->n_kv_heads * c->head_dim, ff = c->d_ff;
  memset(a, 0, sizeof *a);
  a->xn1 = take(&p, n * d);
  a->rstd1 = take(&p, n);
  a->qkv = take(&p, n * (qw + 2 * kvd));
  // Without q/k norms RoPE turns the projection's q and k into attention's
  // inputs in place; with them, the norms write q and k out of it (and out
  // of the gates between q's heads, when there are gates).
  a->ldq = a->ldk = a->ldv = (int)(qw + 2 * kvd);
  a->q = a->qkv, a->k = a->qkv + qw, a->v = a->qkv + qw + kvd;
  if (c->qk_norm) {
    a->q = take(&p, n * qd), a->ldq = (int)qd;
    a->k = take(&p, n * kvd), a->ldk = (int)kvd;
    a->rstdq = take(&p, n * c->n_heads);
    a->rstdk = take(&p, n * c->n_kv_heads);
  }
  a->att = take(&p, n * qd);
  if (c->attn_gate) a->attg = take(&p, n * qd);
  a->lse = take(&p, (size_t)B * c->n_heads * T);
  a->xmid = take(&p, n * d);
  a->xn2 = take(&p, n * d);
  a->rstd2 = take(&p, n);
  a->gu = take(&p, n * ff * 2);
  a->hact = take(&p, n * ff);
  if (c->norm_plus_one) {
    a->w1 = take(&p, d), a->w2 = take(&p, d);
    a->wq = take(&p, (size_t)c->head_dim), a->wk = take(&p, (size_t)c->head_dim);
  }
}

void eng_layer_scratch_bind(eng_layer_scratch *s, float *p, const eng_config *c, int B, int T) {
  size_t n = (size_t)B * T, d = c->d_model, qd = (size_t)c->n_heads * c->head_dim, qw = q_width(c);
  size_t kvd = (size_t)c->n_kv_heads * c->head_dim, ff = c->d_ff;
  s->dh = take(&p, n * ff);
  s->dgu = take(&p, n * ff * 2);
  s->dxn = take(&p, n * d);
  s->dxmid = take(&p, n * d);
  s->datt = take(&p, n * qd);
  s->dqkv = take(&p, n * (qw + 2 * kvd));
  // Attention's gradients land where the fused projection's backward reads
  // them, except q's and k's when the norms stand between (then laid out like
  // the acts' q and k).
  s->dq = s->dqkv, s->dk = s->dqkv + qw, s->dv = s->dqkv + qw + kvd;
  if (c->qk_norm) s->dq = take(&p, n * qd), s->dk = take(&p, n * kvd);
}

// Row epilogues of the products (eng_k_linear_*_then): the elementwise step
// that follows a product runs on its rows while they are in cache.
typedef struct rows_ctx {
  const eng_config *c;
  const float *x, *wn;      // the layer input, the MLP norm's weight
  float *y;                 // the layer output
  eng_layer_acts *a;
  const float *dh;          // backward: d hact
  float *dgu;               //           d gate|up
} rows_ctx;

// xmid = x + o-projection (in y), then the MLP norm of those rows.
static void rows_attn_out(void *p, int r0, int r1) {
  rows_ctx *r = p;
  const int d = r->c->d_model;
  for (size_t i = (size_t)r0 * d; i < (size_t)r1 * d; i++) r->a->xmid[i] = r->x[i] + r->y[i];
  eng_k_rmsnorm_fwd(r->a->xn2 + (size_t)r0 * d, r->a->rstd2 + r0, r->a->xmid + (size_t)r0 * d, r->wn, r1 - r0, d,
                    r->c->rms_eps);
}

static void rows_swiglu(void *p, int r0, int r1) {
  rows_ctx *r = p;
  const size_t ff = (size_t)r->c->d_ff;
  eng_k_swiglu_fwd(r->a->hact + r0 * ff, r->a->gu + r0 * 2 * ff, r1 - r0, (int)ff);
}

// y = down-projection (in y) + xmid.
static void rows_mlp_out(void *p, int r0, int r1) {
  rows_ctx *r = p;
  const int d = r->c->d_model;
  for (size_t i = (size_t)r0 * d; i < (size_t)r1 * d; i++) r->y[i] = r->y[i] + r->a->xmid[i];
}

static void rows_swiglu_bwd(void *p, int r0, int r1) {
  rows_ctx *r = p;
  const size_t ff = (size_t)r->c->d_ff;
  eng_k_swiglu_bwd(r->dgu + r0 * 2 * ff, r->dh + r0 * ff, r->a->gu + r0 * 2 * ff, r1 - r0, (int)ff);
}

// POET-X weight k of the layer: the shard's tensor p (out × in) and bias.
static eng_poet_weight poet_w(const eng_poet_layer *pl, int k, const eng_layout *lo, const float *w, eng_layer_param p,
                              eng_layer_param bias) {
  const eng_tensor *t = &lo->layer_proto[p];
  return (eng_poet_weight){t->rows, t->cols, pl->b, w + t->off,
                           bias != ENG_P_LAYER_COUNT && lo->layer_proto[bias].numel ? w + lo->layer_proto[bias].off : NULL,
                           pl->pin[k], pl->pout[k], pl->rin[k], pl->rout[k]};
}

// Weight k's kept product in the acts' z (fast mode), or NULL.
static float *poet_z(const eng_layout *lo, const eng_layer_acts *a, int k, int n) {
  if (!a->z) return NULL;
  size_t off = 0;
  for (int i = 0; i < k; i++) off += (size_t)lo->layer_proto[eng_poet_param[i]].rows;
  return a->z + off * (size_t)n;
}

// y (rows ldy apart) = weight k's chain of x (rows ldx apart).
static void poet_fwd(const eng_poet_layer *pl, int k, const eng_layout *lo, const float *w, int n, const float *x,
                     int ldx, float *y, int ldy, const eng_layer_acts *a) {
  eng_poet_weight pw = poet_w(pl, k, lo, w, eng_poet_param[k], eng_poet_bias[k]);
  eng_poet_forward(&pw, n, x, ldx, y, ldy, poet_z(lo, a, k, n), pl->work);
}

static void poet_bwd(const eng_poet_layer *pl, int k, const eng_layout *lo, const float *w, int n, const float *x,
                     int ldx, const float *dy, int lddy, float *dx, int lddx, int add, const eng_layer_acts *a) {
  eng_poet_weight pw = poet_w(pl, k, lo, w, eng_poet_param[k], eng_poet_bias[k]);
  eng_poet_backward(&pw, n, x, ldx, poet_z(lo, a, k, n), dy, lddy, dx, lddx, add, pl->drin[k], pl->drout[k],
                    pl->work);
}

// The weights the norms multiply by: the stored ones, or 1 + them for
// zero-centred norms (kept in the acts for the backward; the same bits as
// transformers' x̂·(1 + w)).
typedef struct norms {
  const float *n1, *n2, *q, *k;
} norms;

static norms norms_of(const eng_config *c, const eng_layout *lo, const float *w, const eng_layer_acts *a) {
  norms m = {W(ENG_P_ATTN_NORM), W(ENG_P_MLP_NORM), W(ENG_P_QNORM), W(ENG_P_KNORM)};
  if (c->norm_plus_one) m = (norms){a->w1, a->w2, c->qk_norm ? a->wq : NULL, c->qk_norm ? a->wk : NULL};
  return m;
}

static void plus_one(float *dst, const float *w, int n) {
  for (int j = 0; j < n; j++) dst[j] = 1.0f + w[j];
}

void eng_layer_fwd(const eng_config *c, const eng_layout *lo, const float *w, const float *x,
                   float *y, const int32_t *pos, int B, int T, eng_layer_acts *a, const eng_poet_layer *poet) {
  const int n = B * T, d = c->d_model, H = c->n_heads, KV = c->n_kv_heads, hd = c->head_dim;
  const int qd = H * hd, qw = (int)q_width(c), kvd = KV * hd, qkvd = qw + 2 * kvd, ff = c->d_ff;
  if (c->norm_plus_one) {
    plus_one(a->w1, W(ENG_P_ATTN_NORM), d), plus_one(a->w2, W(ENG_P_MLP_NORM), d);
    if (c->qk_norm) plus_one(a->wq, W(ENG_P_QNORM), hd), plus_one(a->wk, W(ENG_P_KNORM), hd);
  }
  const norms nw = norms_of(c, lo, w, a);

  eng_k_rmsnorm_fwd(a->xn1, a->rstd1, x, nw.n1, n, d, c->rms_eps);
  // q, k and v as one product: the layout stacks their weights and biases.
  if (poet) {
    poet_fwd(poet, ENG_POET_Q, lo, w, n, a->xn1, d, a->qkv, qkvd, a);
    poet_fwd(poet, ENG_POET_K, lo, w, n, a->xn1, d, a->qkv + qw, qkvd, a);
    poet_fwd(poet, ENG_POET_V, lo, w, n, a->xn1, d, a->qkv + qw + kvd, qkvd, a);
  } else {
    eng_k_linear_fwd(a->qkv, a->xn1, W(ENG_P_WQ), W(ENG_P_BQ), n, d, qkvd);
  }
  if (c->qk_norm) { // Qwen3: RMSNorm over each head's hd values, before RoPE
    eng_k_headnorm_hs_fwd(a->q, a->ldq, a->rstdq, a->qkv, qkvd, qw / H, nw.q, n, H, hd, c->rms_eps);
    eng_k_headnorm_fwd(a->k, a->ldk, a->rstdk, a->qkv + qw, qkvd, nw.k, n, KV, hd, c->rms_eps);
  }
  const eng_k_rope r = rope_of(c);
  eng_k_rope_fwd(a->q, a->ldq, pos, B, T, H, hd, &r);
  eng_k_rope_fwd(a->k, a->ldk, pos, B, T, KV, hd, &r);
  eng_k_attention_fwd(a->att, a->lse, a->q, a->ldq, a->k, a->ldk, a->v, a->ldv, pos, B, T, H, KV, hd, c->window);
  // Qwen3.5: the output times sigmoid of the gate after each head's query.
  const float *oin = a->att;
  if (c->attn_gate) eng_k_sgate_fwd(a->attg, a->att, a->qkv + hd, qkvd, 2 * hd, n, H, hd), oin = a->attg;
  // o projection lands in y; its rows become xmid = x + y and the MLP norm.
  rows_ctx rc = {c, x, nw.n2, y, a, NULL, NULL};
  if (poet) { // the chains, then the same row epilogues over all rows
    poet_fwd(poet, ENG_POET_O, lo, w, n, oin, qd, y, d, a);
    rows_attn_out(&rc, 0, n);
    poet_fwd(poet, ENG_POET_GATE, lo, w, n, a->xn2, d, a->gu, 2 * ff, a);
    poet_fwd(poet, ENG_POET_UP, lo, w, n, a->xn2, d, a->gu + ff, 2 * ff, a);
    rows_swiglu(&rc, 0, n);
    poet_fwd(poet, ENG_POET_DOWN, lo, w, n, a->hact, ff, y, d, a);
    rows_mlp_out(&rc, 0, n);
    return;
  }
  eng_k_linear_fwd_then(y, oin, W(ENG_P_WO), NULL, n, qd, d, rows_attn_out, &rc);
  // gate and up as one product (the layout stacks their weights), SwiGLU on
  // its rows; then down, plus the residual.
  eng_k_linear_fwd_then(a->gu, a->xn2, W(ENG_P_WGATE), NULL, n, d, 2 * ff, rows_swiglu, &rc);
  eng_k_linear_fwd_then(y, a->hact, W(ENG_P_WDOWN), NULL, n, ff, d, rows_mlp_out, &rc);
}

void eng_layer_bwd(const eng_config *c, const eng_layout *lo, const float *w, float *dw,
                   const float *x, const eng_layer_acts *a, const float *dy, float *dx,
                   const int32_t *pos, int B, int T, eng_layer_scratch *s, const eng_poet_layer *poet) {
  const int n = B * T, d = c->d_model, H = c->n_heads, KV = c->n_kv_heads, hd = c->head_dim;
  const int qd = H * hd, qw = (int)q_width(c), kvd = KV * hd, qkvd = qw + 2 * kvd, ff = c->d_ff;
  const norms nw = norms_of(c, lo, w, a);
  const float *oin = c->attn_gate ? a->attg : a->att;

  // MLP: y = xmid + down(silu(gate) * up), gate/up = proj(norm2(xmid)).
  rows_ctx rc = {c, x, NULL, NULL, (eng_layer_acts *)a, s->dh, s->dgu};
  if (poet) {
    poet_bwd(poet, ENG_POET_DOWN, lo, w, n, a->hact, ff, dy, d, s->dh, ff, 0, a);
    rows_swiglu_bwd(&rc, 0, n);
    poet_bwd(poet, ENG_POET_GATE, lo, w, n, a->xn2, d, s->dgu, 2 * ff, s->dxn, d, 0, a);
    poet_bwd(poet, ENG_POET_UP, lo, w, n, a->xn2, d, s->dgu + ff, 2 * ff, s->dxn, d, 1, a);
  } else {
    eng_k_linear_bwd_then(s->dh, DW(ENG_P_WDOWN), NULL, dy, a->hact, W(ENG_P_WDOWN), n, ff, d, 0, rows_swiglu_bwd,
                          &rc);
    eng_k_linear_bwd(s->dxn, DW(ENG_P_WGATE), NULL, s->dgu, a->xn2, W(ENG_P_WGATE), n, d, 2 * ff, 0);
  }
  // dy reaches xmid through the residual and through the norm.
  eng_k_rmsnorm_bwd(s->dxmid, DW(ENG_P_MLP_NORM), s->dxn, dy, a->xmid, nw.n2, a->rstd2, n, d);

  // Attention: xmid = x + o(gate(attn(rope(qk_norm(proj(norm1(x))))))).
  if (poet) poet_bwd(poet, ENG_POET_O, lo, w, n, oin, qd, s->dxmid, d, s->datt, qd, 0, a);
  else eng_k_linear_bwd(s->datt, DW(ENG_P_WO), NULL, s->dxmid, oin, W(ENG_P_WO), n, qd, d, 0);
  // Through the gate: datt in place, dgate into the gate's place in dqkv.
  if (c->attn_gate) eng_k_sgate_bwd(s->datt, s->dqkv + hd, s->datt, a->att, a->qkv + hd, qkvd, 2 * hd, n, H, hd);
  eng_k_attention_bwd(s->dq, s->dk, s->dv, s->datt, a->att, a->lse, a->q, a->ldq, a->k, a->ldk, a->v, a->ldv,
                      pos, B, T, H, KV, hd, c->window);
  const eng_k_rope r = rope_of(c);
  eng_k_rope_bwd(s->dq, a->ldq, pos, B, T, H, hd, &r);
  eng_k_rope_bwd(s->dk, a->ldk, pos, B, T, KV, hd, &r);
  if (c->qk_norm) { // back through the per-head norms, into the fused gradient
    eng_k_headnorm_hs_bwd(s->dqkv, DW(ENG_P_QNORM), s->dq, qd, a->qkv, qkvd, qw / H, nw.q, a->rstdq, n, H, hd);
    eng_k_headnorm_bwd(s->dqkv + qw, DW(ENG_P_KNORM), s->dk, kvd, a->qkv + qw, qkvd, nw.k, a->rstdk, n, KV, hd);
  }
  if (poet) {
    poet_bwd(poet, ENG_POET_Q, lo, w, n, a->xn1, d, s->dqkv, qkvd, s->dxn, d, 0, a);
    poet_bwd(poet, ENG_POET_K, lo, w, n, a->xn1, d, s->dqkv + qw, qkvd, s->dxn, d, 1, a);
    poet_bwd(poet, ENG_POET_V, lo, w, n, a->xn1, d, s->dqkv + qw + kvd, qkvd, s->dxn, d, 1, a);
  } else {
    eng_k_linear_bwd(s->dxn, DW(ENG_P_WQ), DW(ENG_P_BQ), s->dqkv, a->xn1, W(ENG_P_WQ), n, d, qkvd, 0);
  }
  eng_k_rmsnorm_bwd(dx, DW(ENG_P_ATTN_NORM), s->dxn, s->dxmid, x, nw.n1, a->rstd1, n, d);
}
