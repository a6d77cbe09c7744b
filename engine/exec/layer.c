#include "exec/layer.h"

#include <string.h>

#include "kernels/kernels.h"
#include "poet/state.h"

#define W(p) (lo->layer_proto[p].numel ? w + lo->layer_proto[p].off : NULL)
#define DW(p) (lo->layer_proto[p].numel ? dw + lo->layer_proto[p].off : NULL)

size_t eng_layer_acts_floats(const eng_config *c, int B, int T) {
  size_t n = (size_t)B * T, d = c->d_model, qd = (size_t)c->n_heads * c->head_dim;
  size_t kvd = (size_t)c->n_kv_heads * c->head_dim, ff = c->d_ff;
  size_t qk = c->qk_norm ? n * (qd + kvd) + n * (c->n_heads + c->n_kv_heads) : 0;
  return n * d * 3 + n * 2 + n * (qd + 2 * kvd) + qk + n * qd + (size_t)B * c->n_heads * T + n * ff * 3;
}

size_t eng_layer_acts_z_floats(const eng_config *c, int B, int T) {
  size_t n = (size_t)B * T, qd = (size_t)c->n_heads * c->head_dim, kvd = (size_t)c->n_kv_heads * c->head_dim;
  return n * (qd + 2 * kvd + 2 * (size_t)c->d_model + 2 * (size_t)c->d_ff);
}

size_t eng_layer_scratch_floats(const eng_config *c, int B, int T) {
  size_t n = (size_t)B * T, d = c->d_model, qd = (size_t)c->n_heads * c->head_dim;
  size_t kvd = (size_t)c->n_kv_heads * c->head_dim;
  size_t qk = c->qk_norm ? n * (qd + kvd) : 0;
  return n * c->d_ff * 3 + n * d * 2 + n * qd + n * (qd + 2 * kvd) + qk;
}

static float *take(float **p, size_t n) {
  float *r = *p;
  *p += n;
  return r;
}

void eng_layer_acts_bind(eng_layer_acts *a, float *p, const eng_config *c, int B, int T) {
  size_t n = (size_t)B * T, d = c->d_model, qd = (size_t)c->n_heads * c->head_dim;
  size_t kvd = (size_t)c->n_kv_heads * c->head_dim, ff = c->d_ff;
  memset(a, 0, sizeof *a);
  a->xn1 = take(&p, n * d);
  a->rstd1 = take(&p, n);
  a->qkv = take(&p, n * (qd + 2 * kvd));
  // Without q/k norms RoPE turns the projection's q and k into attention's
  // inputs in place; with them, the norms write q and k out of it.
  a->ldq = a->ldk = a->ldv = (int)(qd + 2 * kvd);
  a->q = a->qkv, a->k = a->qkv + qd, a->v = a->qkv + qd + kvd;
  if (c->qk_norm) {
    a->q = take(&p, n * qd), a->ldq = (int)qd;
    a->k = take(&p, n * kvd), a->ldk = (int)kvd;
    a->rstdq = take(&p, n * c->n_heads);
    a->rstdk = take(&p, n * c->n_kv_heads);
  }
  a->att = take(&p, n * qd);
  a->lse = take(&p, (size_t)B * c->n_heads * T);
  a->xmid = take(&p, n * d);
  a->xn2 = take(&p, n * d);
  a->rstd2 = take(&p, n);
  a->gu = take(&p, n * ff * 2);
  a->hact = take(&p, n * ff);
}

void eng_layer_scratch_bind(eng_layer_scratch *s, float *p, const eng_config *c, int B, int T) {
  size_t n = (size_t)B * T, d = c->d_model, qd = (size_t)c->n_heads * c->head_dim;
  size_t kvd = (size_t)c->n_kv_heads * c->head_dim, ff = c->d_ff;
  s->dh = take(&p, n * ff);
  s->dgu = take(&p, n * ff * 2);
  s->dxn = take(&p, n * d);
  s->dxmid = take(&p, n * d);
  s->datt = take(&p, n * qd);
  s->dqkv = take(&p, n * (qd + 2 * kvd));
  // Attention's gradients land where the fused projection's backward reads
  // them, except q's and k's when the norms stand between (then laid out like
  // the acts' q and k).
  s->dq = s->dqkv, s->dk = s->dqkv + qd, s->dv = s->dqkv + qd + kvd;
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

void eng_layer_fwd(const eng_config *c, const eng_layout *lo, const float *w, const float *x,
                   float *y, const int32_t *pos, int B, int T, eng_layer_acts *a, const eng_poet_layer *poet) {
  const int n = B * T, d = c->d_model, H = c->n_heads, KV = c->n_kv_heads, hd = c->head_dim;
  const int qd = H * hd, kvd = KV * hd, qkvd = qd + 2 * kvd, ff = c->d_ff;

  eng_k_rmsnorm_fwd(a->xn1, a->rstd1, x, W(ENG_P_ATTN_NORM), n, d, c->rms_eps);
  // q, k and v as one product: the layout stacks their weights and biases.
  if (poet) {
    poet_fwd(poet, ENG_POET_Q, lo, w, n, a->xn1, d, a->qkv, qkvd, a);
    poet_fwd(poet, ENG_POET_K, lo, w, n, a->xn1, d, a->qkv + qd, qkvd, a);
    poet_fwd(poet, ENG_POET_V, lo, w, n, a->xn1, d, a->qkv + qd + kvd, qkvd, a);
  } else {
    eng_k_linear_fwd(a->qkv, a->xn1, W(ENG_P_WQ), W(ENG_P_BQ), n, d, qkvd);
  }
  if (c->qk_norm) { // Qwen3: RMSNorm over each head's hd values, before RoPE
    eng_k_headnorm_fwd(a->q, a->ldq, a->rstdq, a->qkv, qkvd, W(ENG_P_QNORM), n, H, hd, c->rms_eps);
    eng_k_headnorm_fwd(a->k, a->ldk, a->rstdk, a->qkv + qd, qkvd, W(ENG_P_KNORM), n, KV, hd, c->rms_eps);
  }
  eng_k_rope_fwd(a->q, a->ldq, pos, B, T, H, hd, c->rope_theta);
  eng_k_rope_fwd(a->k, a->ldk, pos, B, T, KV, hd, c->rope_theta);
  eng_k_attention_fwd(a->att, a->lse, a->q, a->ldq, a->k, a->ldk, a->v, a->ldv, pos, B, T, H, KV, hd);
  // o projection lands in y; its rows become xmid = x + y and the MLP norm.
  rows_ctx rc = {c, x, W(ENG_P_MLP_NORM), y, a, NULL, NULL};
  if (poet) { // the chains, then the same row epilogues over all rows
    poet_fwd(poet, ENG_POET_O, lo, w, n, a->att, qd, y, d, a);
    rows_attn_out(&rc, 0, n);
    poet_fwd(poet, ENG_POET_GATE, lo, w, n, a->xn2, d, a->gu, 2 * ff, a);
    poet_fwd(poet, ENG_POET_UP, lo, w, n, a->xn2, d, a->gu + ff, 2 * ff, a);
    rows_swiglu(&rc, 0, n);
    poet_fwd(poet, ENG_POET_DOWN, lo, w, n, a->hact, ff, y, d, a);
    rows_mlp_out(&rc, 0, n);
    return;
  }
  eng_k_linear_fwd_then(y, a->att, W(ENG_P_WO), NULL, n, qd, d, rows_attn_out, &rc);
  // gate and up as one product (the layout stacks their weights), SwiGLU on
  // its rows; then down, plus the residual.
  eng_k_linear_fwd_then(a->gu, a->xn2, W(ENG_P_WGATE), NULL, n, d, 2 * ff, rows_swiglu, &rc);
  eng_k_linear_fwd_then(y, a->hact, W(ENG_P_WDOWN), NULL, n, ff, d, rows_mlp_out, &rc);
}

void eng_layer_bwd(const eng_config *c, const eng_layout *lo, const float *w, float *dw,
                   const float *x, const eng_layer_acts *a, const float *dy, float *dx,
                   const int32_t *pos, int B, int T, eng_layer_scratch *s, const eng_poet_layer *poet) {
  const int n = B * T, d = c->d_model, H = c->n_heads, KV = c->n_kv_heads, hd = c->head_dim;
  const int qd = H * hd, kvd = KV * hd, qkvd = qd + 2 * kvd, ff = c->d_ff;

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
  eng_k_rmsnorm_bwd(s->dxmid, DW(ENG_P_MLP_NORM), s->dxn, dy, a->xmid, W(ENG_P_MLP_NORM), a->rstd2, n, d);

  // Attention: xmid = x + o(attn(rope(qk_norm(proj(norm1(x)))))).
  if (poet) poet_bwd(poet, ENG_POET_O, lo, w, n, a->att, qd, s->dxmid, d, s->datt, qd, 0, a);
  else eng_k_linear_bwd(s->datt, DW(ENG_P_WO), NULL, s->dxmid, a->att, W(ENG_P_WO), n, qd, d, 0);
  eng_k_attention_bwd(s->dq, s->dk, s->dv, s->datt, a->att, a->lse, a->q, a->ldq, a->k, a->ldk, a->v, a->ldv,
                      pos, B, T, H, KV, hd);
  eng_k_rope_bwd(s->dq, a->ldq, pos, B, T, H, hd, c->rope_theta);
  eng_k_rope_bwd(s->dk, a->ldk, pos, B, T, KV, hd, c->rope_theta);
  if (c->qk_norm) { // back through the per-head norms, into the fused gradient
    eng_k_headnorm_bwd(s->dqkv, DW(ENG_P_QNORM), s->dq, qd, a->qkv, qkvd, W(ENG_P_QNORM), a->rstdq, n, H, hd);
    eng_k_headnorm_bwd(s->dqkv + qd, DW(ENG_P_KNORM), s->dk, kvd, a->qkv + qd, qkvd, W(ENG_P_KNORM), a->rstdk, n,
                       KV, hd);
  }
  if (poet) {
    poet_bwd(poet, ENG_POET_Q, lo, w, n, a->xn1, d, s->dqkv, qkvd, s->dxn, d, 0, a);
    poet_bwd(poet, ENG_POET_K, lo, w, n, a->xn1, d, s->dqkv + qd, qkvd, s->dxn, d, 1, a);
    poet_bwd(poet, ENG_POET_V, lo, w, n, a->xn1, d, s->dqkv + qd + kvd, qkvd, s->dxn, d, 1, a);
  } else {
    eng_k_linear_bwd(s->dxn, DW(ENG_P_WQ), DW(ENG_P_BQ), s->dqkv, a->xn1, W(ENG_P_WQ), n, d, qkvd, 0);
  }
  eng_k_rmsnorm_bwd(dx, DW(ENG_P_ATTN_NORM), s->dxn, s->dxmid, x, W(ENG_P_ATTN_NORM), a->rstd1, n, d);
}
