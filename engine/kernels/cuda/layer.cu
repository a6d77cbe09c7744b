// One transformer layer on the GPU, composed from the cuda kernels exactly as
// exec/layer.c composes the cpu ones:
//   x ─ RMSNorm ─ q,k,v proj (+bias) ─ [q/k RMSNorm] ─ RoPE ─ attention ─ o proj (+x) = xmid
//   xmid ─ RMSNorm ─ gate,up proj ─ SwiGLU ─ down proj (+xmid) = y
// The residual adds ride in the o and down GEMMs (their C operand), so each
// is one rounding to bf16.
#include "kernels/cuda/ctx.cuh"
#include "kernels/kernels.h"

extern "C" {
#include "model/rope.h"
}

#define W(p) (lo->layer_proto[p].numel ? w + lo->layer_proto[p].off : NULL)
#define DW(p) (lo->layer_proto[p].numel ? dw + lo->layer_proto[p].off : NULL)
#define TRY(call)          \
  do {                     \
    int rc_ = (call);      \
    if (rc_) return rc_;   \
  } while (0)

static int copy(eng_bf16 *dst, const eng_bf16 *src, size_t count, cudaStream_t s, eng_err *e) {
  ENG_CUDA_TRY(cudaMemcpyAsync(dst, src, count * sizeof(eng_bf16), cudaMemcpyDeviceToDevice, s), e);
  return 0;
}

int eng_cuda_layer_fwd(eng_cuda_ctx *cx, const eng_config *c, const eng_layout *lo, const eng_bf16 *w,
                       const eng_bf16 *x, eng_bf16 *y, const int32_t *pos, int B, int T,
                       const eng_cuda_layer_acts *a, eng_err *e) {
  TRY(eng_cuda_check_config(c, e));
  const int n = B * T, d = c->d_model, H = c->n_heads, KV = c->n_kv_heads, hd = c->head_dim;
  const int qd = H * hd, kvd = KV * hd, ff = c->d_ff;
  cudaStream_t s = cx->stream;

  TRY(eng_cuda_rmsnorm_fwd(a->xn1, a->rstd1, x, W(ENG_P_ATTN_NORM), n, d, c->rms_eps, s, e));
  eng_bf16 *q = c->qk_norm ? a->qpre : a->q, *k = c->qk_norm ? a->kpre : a->k;
  TRY(eng_cuda_linear_fwd(cx, q, a->xn1, W(ENG_P_WQ), W(ENG_P_BQ), NULL, n, d, qd, e));
  TRY(eng_cuda_linear_fwd(cx, k, a->xn1, W(ENG_P_WK), W(ENG_P_BK), NULL, n, d, kvd, e));
  TRY(eng_cuda_linear_fwd(cx, a->v, a->xn1, W(ENG_P_WV), W(ENG_P_BV), NULL, n, d, kvd, e));
  if (c->qk_norm) { // Qwen3: RMSNorm over each head's hd values, before RoPE
    TRY(eng_cuda_rmsnorm_fwd(a->q, a->rstdq, a->qpre, W(ENG_P_QNORM), n * H, hd, c->rms_eps, s, e));
    TRY(eng_cuda_rmsnorm_fwd(a->k, a->rstdk, a->kpre, W(ENG_P_KNORM), n * KV, hd, c->rms_eps, s, e));
  }
  eng_k_rope r;
  eng_rope_table(c, &r);
  TRY(eng_cuda_rope_fwd(a->q, pos, B, T, H, hd, &r, s, e));
  TRY(eng_cuda_rope_fwd(a->k, pos, B, T, KV, hd, &r, s, e));
  TRY(eng_cuda_attention_fwd(a->att, a->lse, a->q, a->k, a->v, pos, B, T, H, KV, hd, s, e));
  TRY(eng_cuda_linear_fwd(cx, a->xmid, a->att, W(ENG_P_WO), NULL, x, n, qd, d, e));

  TRY(eng_cuda_rmsnorm_fwd(a->xn2, a->rstd2, a->xmid, W(ENG_P_MLP_NORM), n, d, c->rms_eps, s, e));
  TRY(eng_cuda_linear_fwd(cx, a->gate, a->xn2, W(ENG_P_WGATE), NULL, NULL, n, d, ff, e));
  TRY(eng_cuda_linear_fwd(cx, a->up, a->xn2, W(ENG_P_WUP), NULL, NULL, n, d, ff, e));
  TRY(eng_cuda_swiglu_fwd(a->hact, a->gate, a->up, (size_t)n * ff, s, e));
  return eng_cuda_linear_fwd(cx, y, a->hact, W(ENG_P_WDOWN), NULL, a->xmid, n, ff, d, e);
}

int eng_cuda_layer_bwd(eng_cuda_ctx *cx, const eng_config *c, const eng_layout *lo, const eng_bf16 *w, float *dw,
                       const eng_bf16 *x, const eng_cuda_layer_acts *a, const eng_bf16 *dy, eng_bf16 *dx,
                       const int32_t *pos, int B, int T, const eng_cuda_layer_scratch *s, eng_err *e) {
  TRY(eng_cuda_check_config(c, e));
  const int n = B * T, d = c->d_model, H = c->n_heads, KV = c->n_kv_heads, hd = c->head_dim;
  const int qd = H * hd, kvd = KV * hd, ff = c->d_ff;
  cudaStream_t st = cx->stream;

  // MLP: y = xmid + down(silu(gate) * up), gate/up = proj(norm2(xmid)).
  TRY(eng_cuda_linear_bwd(cx, s->dff1, DW(ENG_P_WDOWN), NULL, dy, a->hact, W(ENG_P_WDOWN), n, ff, d, 0, e));
  TRY(eng_cuda_swiglu_bwd(s->dff2, s->dff3, s->dff1, a->gate, a->up, (size_t)n * ff, st, e));
  TRY(eng_cuda_linear_bwd(cx, s->dxn, DW(ENG_P_WGATE), NULL, s->dff2, a->xn2, W(ENG_P_WGATE), n, d, ff, 0, e));
  TRY(eng_cuda_linear_bwd(cx, s->dxn, DW(ENG_P_WUP), NULL, s->dff3, a->xn2, W(ENG_P_WUP), n, d, ff, 1, e));
  TRY(copy(s->dxmid, dy, (size_t)n * d, st, e)); // the residual path
  TRY(eng_cuda_rmsnorm_bwd(cx, s->dxmid, DW(ENG_P_MLP_NORM), s->dxn, a->xmid, W(ENG_P_MLP_NORM), a->rstd2, n, d, 1,
                           e));

  // Attention: xmid = x + o(attn(rope(qk_norm(proj(norm1(x)))))).
  TRY(eng_cuda_linear_bwd(cx, s->datt, DW(ENG_P_WO), NULL, s->dxmid, a->att, W(ENG_P_WO), n, qd, d, 0, e));
  TRY(eng_cuda_attention_bwd(s->dq, s->dk, s->dv, s->datt, a->att, a->lse, a->q, a->k, a->v, pos, B, T, H, KV, hd,
                             s->attn, st, e));
  eng_k_rope r;
  eng_rope_table(c, &r);
  TRY(eng_cuda_rope_bwd(s->dq, pos, B, T, H, hd, &r, st, e));
  TRY(eng_cuda_rope_bwd(s->dk, pos, B, T, KV, hd, &r, st, e));
  if (c->qk_norm) { // back through the per-head norms; datt is free to hold dq_pre
    TRY(eng_cuda_rmsnorm_bwd(cx, s->datt, DW(ENG_P_QNORM), s->dq, a->qpre, W(ENG_P_QNORM), a->rstdq, n * H, hd, 0,
                             e));
    TRY(copy(s->dq, s->datt, (size_t)n * qd, st, e));
    TRY(eng_cuda_rmsnorm_bwd(cx, s->datt, DW(ENG_P_KNORM), s->dk, a->kpre, W(ENG_P_KNORM), a->rstdk, n * KV, hd, 0,
                             e));
    TRY(copy(s->dk, s->datt, (size_t)n * kvd, st, e));
  }
  TRY(eng_cuda_linear_bwd(cx, s->dxn, DW(ENG_P_WQ), DW(ENG_P_BQ), s->dq, a->xn1, W(ENG_P_WQ), n, d, qd, 0, e));
  TRY(eng_cuda_linear_bwd(cx, s->dxn, DW(ENG_P_WK), DW(ENG_P_BK), s->dk, a->xn1, W(ENG_P_WK), n, d, kvd, 1, e));
  TRY(eng_cuda_linear_bwd(cx, s->dxn, DW(ENG_P_WV), DW(ENG_P_BV), s->dv, a->xn1, W(ENG_P_WV), n, d, kvd, 1, e));
  TRY(copy(dx, s->dxmid, (size_t)n * d, st, e));
  return eng_cuda_rmsnorm_bwd(cx, dx, DW(ENG_P_ATTN_NORM), s->dxn, x, W(ENG_P_ATTN_NORM), a->rstd1, n, d, 1, e);
}
