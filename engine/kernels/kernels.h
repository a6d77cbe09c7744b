// Per-op forward and backward kernels of the cpu backend (engine/kernels/cpu).
// The cuda kernels (kernels/cuda/kernels_cuda.h) cover the same ops with
// signatures of their own: bf16 storage, a stream, an error return, and no
// fused products.
//
// Fused products: the layout stacks the q, k and v weights (then their
// biases) and the gate and up weights (model/layout.c), and the cpu layer
// (exec/layer.c) multiplies by each stack as one eng_k_linear product. Hence
// the row strides (ld*) of rope, headnorm and attention, which read q, k and
// v as views into the fused q|k|v rows, and swiglu's stacked gate|up rows.
//
// Conventions:
// - fp32, row-major, contiguous. n = number of token rows (batch * seq).
// - Activations are [n, features]; attention tensors are [B, T, heads, hd]
//   (the natural output of a projection), lse is [B, heads, T].
// - Linear weights are Hugging Face's [out, in]: y = x · Wᵀ + b.
// - "dw +=" means the kernel accumulates into the weight gradient (micro-batches
//   add up); activation gradients are written unless the accumulate flag says add.
// - Determinism: results do not depend on the OpenMP thread count. Reductions
//   over rows (weight gradients, norms) use fixed row blocks combined in block
//   order. No FMA contraction except where written as fmaf.
// - Kernels may run OpenMP regions internally. They allocate nothing that
//   outlives a call: beyond what a scratch size function asks the caller
//   for, only the sgemm's packed panels (on the AMX route at most the size
//   of C plus a 512-deep slice of A and of B, kernels/cpu/gemm_amx.c) and
//   the norm backward's partial sums and the delta rule's per-thread states,
//   freed before they return.
#ifndef ENG_KERNELS_H
#define ENG_KERNELS_H

#include <stddef.h>
#include <stdint.h>

// y[n,out] = x[n,in] · w[out,in]ᵀ (+ b[out] when b != NULL)
void eng_k_linear_fwd(float *y, const float *x, const float *w, const float *b, int n, int in, int out);
// dx[n,in] (= or +=, by accumulate_dx) dy · w ; dw[out,in] += dyᵀ · x ; db[out] += Σ_rows dy.
// dx, dw and db may each be NULL to skip that gradient. On the cpu, a row's y
// and dx do not depend on how the rows are split into calls.
void eng_k_linear_bwd(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w,
                      int n, int in, int out, int accumulate_dx);

// The same, then then(ctx, r0, r1) on rows of y (or dx) once they are final,
// while they are still in cache where the product allows it: ranges are
// disjoint and may run at once on different threads (inside a parallel
// region), so the work on a row must depend on that row alone.
typedef void (*eng_k_rows_fn)(void *ctx, int r0, int r1);
void eng_k_linear_fwd_then(float *y, const float *x, const float *w, const float *b, int n, int in, int out,
                           eng_k_rows_fn then, void *ctx);
void eng_k_linear_bwd_then(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w, int n,
                           int in, int out, int accumulate_dx, eng_k_rows_fn then, void *ctx);

// RMSNorm over the last dim: y = x * rstd * w, rstd[n] = 1/sqrt(mean(x²) + eps).
// Same formula as transformers: the variance is taken in fp32 and w multiplies last.
void eng_k_rmsnorm_fwd(float *y, float *rstd, const float *x, const float *w, int n, int d, float eps);
// dx = dres + (the norm's input gradient), or without dres when it is NULL
// (dres may be dx itself: accumulate); dw[d] += (may be NULL).
void eng_k_rmsnorm_bwd(float *dx, float *dw, const float *dy, const float *dres, const float *x, const float *w,
                       const float *rstd, int n, int d);
// The same norm over each of the heads vectors of hd in a row (Qwen3's q/k
// norms, one weight w[hd] for all heads): row i of x starts at x + i·ldx, of y
// at y + i·ldy; rstd[n·heads]. bwd writes dx laid out like x (ldx) from dy
// (ldy); dw[hd] +=.
void eng_k_headnorm_fwd(float *y, int ldy, float *rstd, const float *x, int ldx, const float *w, int n, int heads,
                        int hd, float eps);
void eng_k_headnorm_bwd(float *dx, float *dw, const float *dy, int ldy, const float *x, int ldx, const float *w,
                        const float *rstd, int n, int heads, int hd);
// The same with x's heads hs floats apart (dx's too; y and dy contiguous):
// Qwen3.5's q_proj interleaves each head's query with its gate (hs = 2·hd).
void eng_k_headnorm_hs_fwd(float *y, int ldy, float *rstd, const float *x, int ldx, int hs, const float *w, int n,
                           int heads, int hd, float eps);
void eng_k_headnorm_hs_bwd(float *dx, float *dw, const float *dy, int ldy, const float *x, int ldx, int hs,
                           const float *w, const float *rstd, int n, int heads, int hd);

// Position ids of packed sequences (rope and attention): pos is [B][T]
// row-major, or NULL for 0..T-1 in every row. pos[b][0] == 0, and for t > 0
// pos[b][t] is 0 (a new document starts at t) or pos[b][t-1] + 1, so the
// documents of a row are implied by pos alone. NULL computes exactly what
// pos = 0..T-1 does.
//
// Largest head dim of the attention and rope kernels (their tile buffers live
// on the stack); a model config with a larger head_dim must be refused.
#define ENG_K_MAX_HD 256

// A head's RoPE: the first rd (even, <= hd) of its values rotate, pair i by
// pos·inv_freq[i], and cos and sin are scaled by scale (YaRN's attention
// factor; 1 otherwise). model/rope.h fills it from a config.
typedef struct eng_k_rope {
  int rd;
  float scale;
  float inv_freq[ENG_K_MAX_HD / 2];
} eng_k_rope;

// Rotary embedding in place on x[B*T, heads, hd] whose rows (tokens) are ld
// floats apart (ld >= heads*hd), row t of batch b at position pos[b][t],
// the rotate-half convention of Llama/Qwen on r's first rd values of each
// head, the rest left alone (a partial rotary factor, Qwen3.5's 0.25): pairs
// (i, i + rd/2). bwd applies the transposed map to dx.
void eng_k_rope_fwd(float *x, int ld, const int32_t *pos, int B, int T, int heads, int hd, const eng_k_rope *r);
void eng_k_rope_bwd(float *dx, int ld, const int32_t *pos, int B, int T, int heads, int hd, const eng_k_rope *r);


// Causal grouped-query attention, tiled with an online softmax so memory is
// O(T·hd) per head and never O(T²). q [B,T,H,hd], k/v [B,T,KV,hd] whose rows
// (tokens) are ldq, ldk, ldv floats apart (they may be views into one fused
// q|k|v row); query head h reads kv head h / (H/KV). scale = 1/sqrt(hd).
// Query t of row b attends keys t - pos[b][t] <= s <= t: causal within its
// document, never across a boundary (pos as above; NULL: every s <= t), and
// with a sliding window (window > 0) only the window's last keys,
// s > t - window, as transformers' sliding-window mask. Key tiles wholly
// before a query tile's first visible key are skipped.
// out [B,T,H,hd] (rows H·hd apart), lse [B,H,T] (natural log of the softmax
// denominator, scale included).
void eng_k_attention_fwd(float *out, float *lse, const float *q, int ldq, const float *k, int ldk, const float *v,
                         int ldv, const int32_t *pos, int B, int T, int H, int KV, int hd, int window);
// Writes dq, dk and dv laid out like q, k and v (overwritten, not
// accumulated; the floats between their rows are left alone); pos and window
// as the forward's, so a key's dk/dv sum over the queries that see it.
void eng_k_attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse,
                         const float *q, int ldq, const float *k, int ldk, const float *v, int ldv,
                         const int32_t *pos, int B, int T, int H, int KV, int hd, int window);

// The gated delta rule (Gated DeltaNet's token mixer, Qwen3.5's linear
// attention) per value head h of each row b, with S [kd, vd] starting at 0:
//   S_t = a_t·S_{t−1} + k_t·(β_t·(v_t − a_t·S_{t−1}ᵀk_t))ᵀ,  o_t = S_tᵀq_t/√kd,
// a_t = exp(g_t). q, k [B,T,Hk,kd] (rows ldq, ldk floats apart; already
// L2-normalised by the caller), v [B,T,Hv,vd] (rows ldv apart), g and β
// [B,T,Hv] (rows ldg apart), out [B,T,Hv,vd] (rows Hv·vd apart). Value head h
// reads key head h / (Hv/Hk), as transformers' repeat_interleave does. A
// token at a record start of a packed row (pos as above; NULL: none) sees
// S_{t−1} = 0. states receives S at the start of every ENG_K_DR_CHUNK tokens,
// [B,Hv,⌈T/C⌉,kd,vd] (eng_k_deltarule_states_floats): all the backward needs
// beyond the inputs, so memory is O(T/C·kd·vd) per head.
#define ENG_K_DR_CHUNK 64
// Most value heads a Gated DeltaNet layer may have (its backward sums dA_log
// and dt_bias per head on the stack, exec/layer_dn.c); Qwen3.5/3.6 have 16 to 64.
#define ENG_K_DN_MAX_V_HEADS 256
size_t eng_k_deltarule_states_floats(int B, int T, int Hv, int kd, int vd);
void eng_k_deltarule_fwd(float *out, float *states, const float *q, int ldq, const float *k, int ldk, const float *v,
                         int ldv, const float *g, const float *beta, int ldg, const int32_t *pos, int B, int T, int Hk,
                         int Hv, int kd, int vd);
// Writes dq, dk, dv laid out like q, k, v, and dg, dβ [B,T,Hv] (rows ldd
// apart), from dout [B,T,Hv,vd] and the forward's states and inputs. Per
// thread it holds a chunk's C+2 states (freed before it returns).
void eng_k_deltarule_bwd(float *dq, float *dk, float *dv, float *dg, float *dbeta, int ldd, const float *dout,
                         const float *states, const float *q, int ldq, const float *k, int ldk, const float *v,
                         int ldv, const float *g, const float *beta, int ldg, const int32_t *pos, int B, int T, int Hk,
                         int Hv, int kd, int vd);

// The blocks around the rule in a Gated DeltaNet layer (kernels/cpu/deltanet.c).
// Causal depthwise conv over time with SiLU: u[t][c] = Σ_j w[c][j]·x[t+j−K+1][c]
// over the taps inside t's record (pos as above; earlier ones count as 0),
// y = silu(u); x rows ldx apart, y and u [B·T, C], w [C, K], K ≤ ENG_K_CONV_MAX.
// bwd writes dx (rows lddx apart) and adds dw.
#define ENG_K_CONV_MAX 8
void eng_k_conv_silu_fwd(float *y, float *u, const float *x, int ldx, const float *w, const int32_t *pos, int B,
                         int T, int C, int K);
void eng_k_conv_silu_bwd(float *dx, int lddx, float *dw, const float *dy, const float *u, const float *x, int ldx,
                         const float *w, const int32_t *pos, int B, int T, int C, int K);
// y = x / sqrt(Σx² + eps) over each of the heads vectors of hd in a row (the
// L2 norm of q and k); rstd[n·heads]. bwd writes dx.
void eng_k_l2norm_fwd(float *y, int ldy, float *rstd, const float *x, int ldx, int n, int heads, int hd, float eps);
void eng_k_l2norm_bwd(float *dx, int lddx, const float *dy, int lddy, const float *x, int ldx, const float *rstd,
                      int n, int heads, int hd);
// Gated RMSNorm per head of hd: y = (w·RMSNorm(x))·silu(z); x, y, dy, dx, dn
// [n, heads·hd], z and dz rows ldz / lddz apart, w [hd], rstd [n·heads]. bwd
// writes dx and dz, adds dw, and uses dn as scratch.
void eng_k_gatednorm_fwd(float *y, float *rstd, const float *x, const float *z, int ldz, const float *w, int n,
                         int heads, int hd, float eps);
void eng_k_gatednorm_bwd(float *dx, float *dw, float *dz, int lddz, float *dn, const float *dy, const float *x,
                         const float *z, int ldz, const float *w, const float *rstd, int n, int heads, int hd);

// Qwen3.5's attention output gate (kernels/cpu/gate.c): y = x·sigmoid(g) per
// head of hd; x, y, dy, dx [n, heads·hd]; head h's gate starts at
// g + i·ldg + h·ghd (ghd = 2·hd where the q projection interleaves each head's
// query and gate). bwd writes dx and dg (laid out like g).
void eng_k_sgate_fwd(float *y, const float *x, const float *g, int ldg, int ghd, int n, int heads, int hd);
void eng_k_sgate_bwd(float *dx, float *dg, const float *dy, const float *x, const float *g, int ldg, int ghd, int n,
                     int heads, int hd);

// h[n,ff] = silu(gate) * up where each row of gu[n,2ff] is gate then up (the
// output of the stacked [gate; up] projection); bwd writes dgu in that layout.
void eng_k_swiglu_fwd(float *h, const float *gu, int n, int ff);
void eng_k_swiglu_bwd(float *dgu, const float *dh, const float *gu, int n, int ff);

// x[n,d] = table[ids[i]]; bwd: dtable[ids[i]] += dx[i] (rows added in i order).
void eng_k_embed_fwd(float *x, const float *table, const int32_t *ids, int n, int d);
// The same from a bf16 table (a working copy), each row widened exactly.
void eng_k_embed_fwd_bf16(float *x, const uint16_t *table, const int32_t *ids, int n, int d);
void eng_k_embed_bwd(float *dtable, const float *dx, const int32_t *ids, int n, int d);
// The same with the n tokens as one group: each row's sum over the group is
// taken first (in i order, from its first term) and then added to dtable,
// so the group adds the same bits to a table whatever other groups added
// before: a data-parallel rank that computes one micro-batch alone gets the
// single process's sums. ENG_ENOMEM for its scratch (n rows).
int eng_k_embed_bwd_group(float *dtable, const float *dx, const int32_t *ids, int n, int d);

// The loss fused with the head, chunked over tokens. For each chunk of rows:
// logits = h · wᵀ, softmax, cross-entropy against targets (a negative target
// is ignored), dlogits = grad_scale * (softmax - onehot) on counted rows, then
// dh = dlogits · w and dw += dlogitsᵀ · h; the full [n, V] logits never exist.
// Returns Σ CE over counted rows (double; the caller divides by the count of
// the whole batch and passes grad_scale = 1/count). dh/dw NULL: forward only.
// logits_out, when not NULL, receives the [n, V] logits (tests, debugging).
// On the cpu, a row's logits, loss and dh do not depend on how the rows are
// split into calls (micro-batches) or on the thread count.
// scratch: eng_k_head_loss_scratch_floats(V) floats.
double eng_k_head_loss(float *dh, float *dw, float *logits_out, const float *h, const float *w,
                       const int32_t *targets, int n, int d, int V, float grad_scale, float *scratch);
size_t eng_k_head_loss_scratch_floats(int V);

// Σ x² in double, blocks of fixed size summed in block order.
double eng_k_sumsq(const float *x, size_t n);

#endif
