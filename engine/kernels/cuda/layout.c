// The device bytes of the cuda kernels' buffers and where each buffer sits
// in them: plain C, built in every build (CUDA or not), so that the
// executor's layout (exec/exec.c), and through it the planner, sizes a GPU
// arena on a machine without one; the kernels (.cu) bind the same layouts.
#include <string.h>

#include "kernels/cuda/kernels_cuda.h"
#include "kernels/kernels.h"

int eng_cuda_check_layout(const eng_config *c, eng_err *e) {
  if (c->head_dim <= 0 || c->head_dim % 16 != 0)
    return eng_err_set(e, ENG_ENOTSUP, "the cuda backend needs head_dim to be a multiple of 16; this model has %d",
                       c->head_dim);
  if (c->n_kv_heads <= 0 || c->n_heads % c->n_kv_heads != 0)
    return eng_err_set(e, ENG_EINVAL, "%d attention heads are not a multiple of %d kv heads", c->n_heads,
                       c->n_kv_heads);
  return 0;
}

int eng_cuda_check_config(const eng_config *c, eng_err *e) {
  int rc = eng_cuda_check_layout(c, e);
  if (rc) return rc;
  if (c->head_dim > ENG_CUDA_MAX_HD)
    return eng_err_set(e, ENG_ENOTSUP,
                       "the cuda backend needs head_dim to be a multiple of 16 up to %d; this model has %d",
                       ENG_CUDA_MAX_HD, c->head_dim);
  if (c->window)
    return eng_err_set(e, ENG_ENOTSUP, "the cuda attention kernels have no sliding window yet (sliding_window %d); "
                       "train this model on the cpu", c->window);
  if (c->attn_gate || c->norm_plus_one || (c->rope_dim && c->rope_dim != c->head_dim) || c->dn.v_heads)
    return eng_err_set(e, ENG_ENOTSUP, "the cuda backend has no Qwen3.5 blocks yet (output gate, zero-centred norms, "
                       "partial RoPE, Gated DeltaNet); train this model on the cpu");
  return 0;
}

void *eng_cuda_carve_take(eng_cuda_carve *cv, size_t bytes) {
  void *p = cv->base ? cv->base + cv->off : NULL;
  cv->off += (bytes + 255) & ~(size_t)255;
  return p;
}

// One layout function both sizes (base NULL) and binds the structs, so the
// bytes counted are the bytes used.
typedef eng_cuda_carve carve;
#define take(T, cv, count) ((T *)eng_cuda_carve_take((cv), (count) * sizeof(T)))

static void acts_layout(eng_cuda_layer_acts *a, carve *cv, const eng_config *c, int B, int T) {
  const size_t n = (size_t)B * T, d = c->d_model, qd = (size_t)c->n_heads * c->head_dim;
  const size_t kvd = (size_t)c->n_kv_heads * c->head_dim, ff = c->d_ff;
  memset(a, 0, sizeof *a);
  a->xn1 = take(eng_bf16, cv, n * d);
  a->rstd1 = take(float, cv, n);
  if (c->qk_norm) {
    a->qpre = take(eng_bf16, cv, n * qd);
    a->kpre = take(eng_bf16, cv, n * kvd);
    a->rstdq = take(float, cv, n * c->n_heads);
    a->rstdk = take(float, cv, n * c->n_kv_heads);
  }
  a->q = take(eng_bf16, cv, n * qd);
  a->k = take(eng_bf16, cv, n * kvd);
  a->v = take(eng_bf16, cv, n * kvd);
  a->att = take(eng_bf16, cv, n * qd);
  a->lse = take(float, cv, (size_t)B * c->n_heads * T);
  if (c->attn_gate) {
    a->graw = take(eng_bf16, cv, n * qd);
    a->attg = take(eng_bf16, cv, n * qd);
  }
  a->xmid = take(eng_bf16, cv, n * d);
  a->xn2 = take(eng_bf16, cv, n * d);
  a->rstd2 = take(float, cv, n);
  a->gate = take(eng_bf16, cv, n * ff);
  a->up = take(eng_bf16, cv, n * ff);
  a->hact = take(eng_bf16, cv, n * ff);
}

static void scratch_layout(eng_cuda_layer_scratch *s, carve *cv, const eng_config *c, int B, int T) {
  const size_t n = (size_t)B * T, d = c->d_model, qd = (size_t)c->n_heads * c->head_dim;
  const size_t kvd = (size_t)c->n_kv_heads * c->head_dim, ff = c->d_ff;
  s->dff1 = take(eng_bf16, cv, n * ff);
  s->dff2 = take(eng_bf16, cv, n * ff);
  s->dff3 = take(eng_bf16, cv, n * ff);
  s->dxn = take(eng_bf16, cv, n * d);
  s->dxmid = take(eng_bf16, cv, n * d);
  s->datt = take(eng_bf16, cv, n * qd);
  s->dq = take(eng_bf16, cv, n * qd);
  s->dk = take(eng_bf16, cv, n * kvd);
  s->dv = take(eng_bf16, cv, n * kvd);
  s->attn = take(char, cv, eng_cuda_attention_bwd_scratch_bytes(B, T, c->n_heads));
}

// A Gated DeltaNet layer's: kt, vt its key and value widths.
typedef struct dn_dims {
  size_t n, d, ff, kt, vt, C, P, hk, hv, states;
} dn_dims;

static dn_dims dn_dims_of(const eng_config *c, int B, int T) {
  dn_dims z = {.n = (size_t)B * T, .d = c->d_model, .ff = c->d_ff, .hk = c->dn.k_heads, .hv = c->dn.v_heads};
  z.kt = z.hk * c->dn.k_dim, z.vt = z.hv * c->dn.v_dim, z.C = 2 * z.kt + z.vt, z.P = z.C + z.vt + 2 * z.hv;
  const size_t chunks = ((size_t)T + ENG_K_DR_CHUNK - 1) / ENG_K_DR_CHUNK;
  z.states = (size_t)B * z.hv * chunks * c->dn.k_dim * c->dn.v_dim;
  return z;
}

static void dn_acts_layout(eng_cuda_dn_acts *a, carve *cv, const eng_config *c, int B, int T) {
  const dn_dims z = dn_dims_of(c, B, T);
  const size_t n = z.n;
  a->xn1 = take(eng_bf16, cv, n * z.d);
  a->rstd1 = take(float, cv, n);
  a->p = take(eng_bf16, cv, n * z.P);
  a->u = take(eng_bf16, cv, n * z.C);
  a->cy = take(eng_bf16, cv, n * z.C);
  a->qn = take(eng_bf16, cv, n * z.kt);
  a->kn = take(eng_bf16, cv, n * z.kt);
  a->rq = take(float, cv, n * z.hk);
  a->rk = take(float, cv, n * z.hk);
  a->g = take(float, cv, n * z.hv);
  a->beta = take(float, cv, n * z.hv);
  a->states = take(float, cv, z.states);
  a->o = take(eng_bf16, cv, n * z.vt);
  a->rn = take(float, cv, n * z.hv);
  a->gn = take(eng_bf16, cv, n * z.vt);
  a->xmid = take(eng_bf16, cv, n * z.d);
  a->xn2 = take(eng_bf16, cv, n * z.d);
  a->rstd2 = take(float, cv, n);
  a->gate = take(eng_bf16, cv, n * z.ff);
  a->up = take(eng_bf16, cv, n * z.ff);
  a->hact = take(eng_bf16, cv, n * z.ff);
}

static void dn_scratch_layout(eng_cuda_dn_scratch *s, carve *cv, const eng_config *c, int B, int T) {
  const dn_dims z = dn_dims_of(c, B, T);
  const size_t n = z.n;
  s->dff1 = take(eng_bf16, cv, n * z.ff);
  s->dff2 = take(eng_bf16, cv, n * z.ff);
  s->dff3 = take(eng_bf16, cv, n * z.ff);
  s->dxn = take(eng_bf16, cv, n * z.d);
  s->dxmid = take(eng_bf16, cv, n * z.d);
  s->dgn = take(eng_bf16, cv, n * z.vt);
  s->dout = take(eng_bf16, cv, n * z.vt);
  s->dqn = take(eng_bf16, cv, n * z.kt);
  s->dkn = take(eng_bf16, cv, n * z.kt);
  s->dcy = take(eng_bf16, cv, n * z.C);
  s->dg = take(float, cv, n * z.hv);
  s->dbeta = take(float, cv, n * z.hv);
  s->dp = take(eng_bf16, cv, n * z.P);
  s->ds = take(float, cv, (size_t)B * z.hv * c->dn.k_dim * c->dn.v_dim);
}

static size_t max_z(size_t a, size_t b) { return a > b ? a : b; }

size_t eng_cuda_layer_acts_bytes(const eng_config *c, int B, int T) {
  eng_cuda_layer_acts a;
  eng_cuda_dn_acts da;
  carve cv = {NULL, 0}, dv = {NULL, 0};
  acts_layout(&a, &cv, c, B, T);
  if (c->full_every) dn_acts_layout(&da, &dv, c, B, T);
  return max_z(cv.off, dv.off);
}

size_t eng_cuda_layer_scratch_bytes(const eng_config *c, int B, int T) {
  eng_cuda_layer_scratch s;
  eng_cuda_dn_scratch ds;
  carve cv = {NULL, 0}, dv = {NULL, 0};
  scratch_layout(&s, &cv, c, B, T);
  if (c->full_every) dn_scratch_layout(&ds, &dv, c, B, T);
  return max_z(cv.off, dv.off);
}

void eng_cuda_layer_acts_bind(eng_cuda_layer_acts *a, void *base, const eng_config *c, int B, int T) {
  carve cv = {(char *)base, 0};
  acts_layout(a, &cv, c, B, T);
}

void eng_cuda_layer_scratch_bind(eng_cuda_layer_scratch *s, void *base, const eng_config *c, int B, int T) {
  carve cv = {(char *)base, 0};
  scratch_layout(s, &cv, c, B, T);
}

// Rows per chunk: fp32 logits of a chunk up to 512 MiB (832 rows at a vocab
// of 152064), a multiple of 64, from 64 to 4096 rows. Long chunks matter:
// dw (V·d fp32) is read and written once per chunk.
int eng_cuda_head_rows_per_chunk(int V) {
  size_t r = ((size_t)128 << 20) / (size_t)(V > 0 ? V : 1);
  r -= r % 64;
  return (int)(r < 64 ? 64 : r > 4096 ? 4096 : r);
}

static size_t up256(size_t n) { return (n + 255) & ~(size_t)255; }

size_t eng_cuda_head_loss_scratch_bytes(int V) {
  size_t R = (size_t)eng_cuda_head_rows_per_chunk(V);
  return up256(R * V * sizeof(float)) + up256(R * V * sizeof(eng_bf16)) + up256(R * sizeof(double));
}

size_t eng_cuda_grad_finish_scratch_bytes(size_t n) { return ((n + ENG_CUDA_GRAD_BLOCK - 1) / ENG_CUDA_GRAD_BLOCK) * sizeof(double); }

size_t eng_cuda_attention_bwd_scratch_bytes(int B, int T, int H) { return (size_t)B * H * T * sizeof(float); }
