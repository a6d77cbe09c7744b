// The cuda kernels (engine/kernels/cuda): the ops of kernels/kernels.h on
// the GPU, callable from C, with signatures of their own: every kernel
// takes the eng_cuda_ctx (first) or a stream (last) and an eng_err, and
// returns 0 or an error; outputs come first as on the cpu. Where the op
// list and arguments differ from kernels.h:
// - No fused products: the cuda layer (layer.cu) runs q, k and v as three
//   products and gate and up as two, each reading its tensor at its offset
//   in the layout (which stacks them for the cpu layer's fused products,
//   model/layout.c). So q, k and v are arrays of their own, rows contiguous
//   (rope and attention take no row strides), and swiglu takes gate and up
//   as two arrays.
// - No headnorm: Qwen3's q/k norms are rmsnorm over n·heads rows of hd.
//   rmsnorm_bwd adds into dx by a flag (no dres); linear_fwd adds a residual
//   (res) in the GEMM; no *_then row epilogues; the head's loss sums into a
//   device double; gradient norms come from eng_cuda_grad_finish (no sumsq).
//   Beyond kernels.h: bf16 conversions, eng_cuda_grad_finish, the whole
//   layer (eng_cuda_layer_fwd/bwd), and POET-X's kernels (poet/poet.h's
//   functions, with the differences their section states).
// What differs in every kernel is stated here once:
//
// - Storage is bf16 with fp32 arithmetic inside every kernel (DESIGN §2;
//   POET-X's kernels keep their activations in fp32, see their section):
//   activations, activation gradients and weights are eng_bf16 arrays;
//   weight gradients are fp32 accumulators ("dw +=") that eng_cuda_grad_finish
//   turns into the bf16 (or fp32) values that cross PCIe. Per-row statistics
//   (rstd, lse, the attention's D) are fp32. Token ids and targets are int32.
// - Every pointer is device memory, 16-byte aligned (the arena's 64-byte
//   carving satisfies this; cuBLASLt is told each pointer's real alignment).
// - Work is queued on a stream: either the eng_cuda_stream argument or the
//   stream of the eng_cuda_ctx (which also holds cuBLASLt and a small
//   reduction scratch). Nothing waits for the GPU; a function returns
//   ENG_EDEVICE (message: file:line, call, CUDA's reason) when a launch is
//   refused, and errors of the kernels themselves surface at the next
//   eng_cuda_stream_sync.
// - Determinism: no atomics; every reduction combines fixed partials in a
//   fixed order, so a run repeats to the bit on the same GPU and library
//   versions. Rows are not independent of the micro-batch split as they are
//   on the cpu (cuBLASLt picks its algorithm by shape).
// - The per-element formulas are the cpu kernels' own (kernels/kmath_hd.h),
//   so elementwise results on bf16 inputs match the cpu to the bit except
//   where a libm function (powf, sinf, cosf, logf, log) differs by an ulp.
#ifndef ENG_KERNELS_CUDA_KERNELS_CUDA_H
#define ENG_KERNELS_CUDA_KERNELS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "common/err.h"
#include "model/config.h"
#include "model/layout.h"

typedef uint16_t eng_bf16;                   // the bits of a bfloat16
typedef struct CUstream_st *eng_cuda_stream; // a cudaStream_t
typedef struct eng_cuda_ctx eng_cuda_ctx;

// ---- context, streams, plain memory ---------------------------------------------

// A cuBLASLt handle, its workspace and the reduction scratch of the column
// sums (norm and bias weight gradients), bound to stream s. Allocates
// eng_cuda_ctx_device_bytes() of device memory outside any arena.
int eng_cuda_ctx_open(eng_cuda_ctx **out, eng_cuda_stream s, eng_err *e);
void eng_cuda_ctx_close(eng_cuda_ctx *cx);
eng_cuda_stream eng_cuda_ctx_stream(const eng_cuda_ctx *cx);
size_t eng_cuda_ctx_device_bytes(void);

// Waits for the work queued on s and reports the first error it hit.
int eng_cuda_stream_sync(eng_cuda_stream s, eng_err *e);

// p[0..bytes) = 0 on stream s.
int eng_cuda_zero(void *p, size_t bytes, eng_cuda_stream s, eng_err *e);
// dst[0..bytes) = src[0..bytes), device to device, on stream s.
int eng_cuda_copy(void *dst, const void *src, size_t bytes, eng_cuda_stream s, eng_err *e);

// Number of CUDA devices, or a negative ENG_EDEVICE with the reason (no
// driver, no device) in e. Touches no device.
int eng_cuda_device_count(eng_err *e);

// ---- conversions ------------------------------------------------------------------

// Round to nearest even (eng_km_bf16_from_f32) and the exact widening.
int eng_cuda_bf16_from_f32(eng_bf16 *dst, const float *src, size_t n, eng_cuda_stream s, eng_err *e);
int eng_cuda_bf16_to_f32(float *dst, const eng_bf16 *src, size_t n, eng_cuda_stream s, eng_err *e);

// ---- the ops of kernels.h --------------------------------------------------------

// y[n,out] = x[n,in] · w[out,in]ᵀ (+ b[out]) (+ res[n,out]): cuBLASLt, fp32
// accumulation, one rounding to bf16 when b is NULL (the residual rides in
// the GEMM's C operand). y may alias res.
int eng_cuda_linear_fwd(eng_cuda_ctx *cx, eng_bf16 *y, const eng_bf16 *x, const eng_bf16 *w, const eng_bf16 *b,
                        const eng_bf16 *res, int n, int in, int out, eng_err *e);
// dx[n,in] (= or +=) dy · w ; dw[out,in] += dyᵀ · x (fp32) ; db[out] += Σ_rows dy (fp32).
int eng_cuda_linear_bwd(eng_cuda_ctx *cx, eng_bf16 *dx, float *dw, float *db, const eng_bf16 *dy, const eng_bf16 *x,
                        const eng_bf16 *w, int n, int in, int out, int accumulate_dx, eng_err *e);

// RMSNorm over rows of d: y = (x·rstd)·w, rstd[n] fp32.
int eng_cuda_rmsnorm_fwd(eng_bf16 *y, float *rstd, const eng_bf16 *x, const eng_bf16 *w, int n, int d, float eps,
                         eng_cuda_stream s, eng_err *e);
// dx (= or +=); dw[d] += (fp32, may be NULL).
int eng_cuda_rmsnorm_bwd(eng_cuda_ctx *cx, eng_bf16 *dx, float *dw, const eng_bf16 *dy, const eng_bf16 *x,
                         const eng_bf16 *w, const float *rstd, int n, int d, int accumulate_dx, eng_err *e);

// Rotary embedding in place on x[B*T, heads, hd] (kernels.h's convention
// and its eng_k_rope table, a host struct), at the position ids pos ([B][T]
// on the device, kernels.h's contract; NULL: 0..T-1 in every row).
struct eng_k_rope;
int eng_cuda_rope_fwd(eng_bf16 *x, const int32_t *pos, int B, int T, int heads, int hd, const struct eng_k_rope *r,
                      eng_cuda_stream s, eng_err *e);
int eng_cuda_rope_bwd(eng_bf16 *dx, const int32_t *pos, int B, int T, int heads, int hd, const struct eng_k_rope *r,
                      eng_cuda_stream s, eng_err *e);

// Largest head dim of the cuda attention kernels; head_dim must also be a
// multiple of 16 (the tensor-core tile). eng_cuda_check_config refuses others.
#define ENG_CUDA_MAX_HD 128

// Causal GQA attention (kernels.h's layouts, rows contiguous: q rows H·hd
// apart, k and v rows KV·hd apart): 64×64 tiles on the tensor
// cores, online softmax, O(T·hd) memory; out bf16, lse fp32 [B,H,T]. pos
// (on the device, NULL allowed) confines each query to its own document
// as kernels.h's eng_k_attention_fwd does, skipping the key tiles before it.
int eng_cuda_attention_fwd(eng_bf16 *out, float *lse, const eng_bf16 *q, const eng_bf16 *k, const eng_bf16 *v,
                           const int32_t *pos, int B, int T, int H, int KV, int hd, eng_cuda_stream s, eng_err *e);
// dq, dk, dv overwritten; pos as the forward's. scratch:
// eng_cuda_attention_bwd_scratch_bytes.
int eng_cuda_attention_bwd(eng_bf16 *dq, eng_bf16 *dk, eng_bf16 *dv, const eng_bf16 *dout, const eng_bf16 *out,
                           const float *lse, const eng_bf16 *q, const eng_bf16 *k, const eng_bf16 *v,
                           const int32_t *pos, int B, int T, int H, int KV, int hd, void *scratch, eng_cuda_stream s,
                           eng_err *e);
size_t eng_cuda_attention_bwd_scratch_bytes(int B, int T, int H);

// h = silu(gate)·up over n values, and its backward.
int eng_cuda_swiglu_fwd(eng_bf16 *h, const eng_bf16 *gate, const eng_bf16 *up, size_t n, eng_cuda_stream s,
                        eng_err *e);
int eng_cuda_swiglu_bwd(eng_bf16 *dgate, eng_bf16 *dup, const eng_bf16 *dh, const eng_bf16 *gate, const eng_bf16 *up,
                        size_t n, eng_cuda_stream s, eng_err *e);

// x[n,d] = table[ids[i]] (bf16); an id outside [0, vocab) gives a zero row
// (ids are validated on the host; this only keeps a bad one in bounds).
// bwd: dtable[ids[i]] += dx[i] in fp32, rows added in i order per column.
int eng_cuda_embed_fwd(eng_bf16 *x, const eng_bf16 *table, const int32_t *ids, int n, int d, int vocab,
                       eng_cuda_stream s, eng_err *e);
int eng_cuda_embed_bwd(float *dtable, const eng_bf16 *dx, const int32_t *ids, int n, int d, int vocab,
                       eng_cuda_stream s, eng_err *e);

// The head fused with the cross-entropy, a chunk of rows at a time (kernels.h's
// eng_k_head_loss): per chunk, fp32 logits = h·wᵀ (cuBLASLt), each row's
// log-sum-exp, loss and bf16 dlogits = grad_scale·(softmax − onehot), then
// dh = dlogits·w and dw += dlogitsᵀ·h (fp32). *loss_sum (device double) +=
// Σ CE over counted rows (targets < 0 count nothing). dh/dw NULL: forward
// only. logits_out (fp32 [n,V], may be NULL) receives the logits.
// scratch: eng_cuda_head_loss_scratch_bytes(V).
int eng_cuda_head_loss(eng_cuda_ctx *cx, eng_bf16 *dh, float *dw, float *logits_out, double *loss_sum,
                       const eng_bf16 *h, const eng_bf16 *w, const int32_t *targets, int n, int d, int V,
                       float grad_scale, void *scratch, eng_err *e);
size_t eng_cuda_head_loss_scratch_bytes(int V);
// Rows of logits the head computes at a time.
int eng_cuda_head_rows_per_chunk(int V);

// A finished gradient: from the fp32 accumulator acc[n], out[n] = bf16(acc)
// (skipped when out is NULL) and *sumsq (device double) = Σ g² over the
// values as stored (bf16 when out, else acc), with the block structure of
// eng_bf16_sumsq / eng_k_sumsq, so the result equals the host's to the bit.
// scratch: eng_cuda_grad_finish_scratch_bytes(n).
int eng_cuda_grad_finish(eng_bf16 *out, double *sumsq, const float *acc, size_t n, void *scratch,
                         eng_cuda_stream s, eng_err *e);
size_t eng_cuda_grad_finish_scratch_bytes(size_t n);
#define ENG_CUDA_GRAD_BLOCK 4096 // values per partial sum of eng_cuda_grad_finish

// ---- one transformer layer (exec/layer.h's composition) --------------------------

// Buffers carved from a region (base NULL: only counted), each starting
// 256-byte aligned as the kernels want; the layouts of layout.c and the
// executor's own region use it.
typedef struct eng_cuda_carve {
  char *base;
  size_t off;
} eng_cuda_carve;
void *eng_cuda_carve_take(eng_cuda_carve *cv, size_t bytes);

// Refuses a config the cuda kernels cannot run (head_dim; Qwen3.5's blocks,
// which have no cuda kernels yet).
int eng_cuda_check_config(const eng_config *c, eng_err *e);
// Refuses a config whose buffers the layouts below cannot size (head_dim not
// a multiple of 16, heads that do not divide): what the executor's arena
// and the planner need, for models the kernels may not run yet.
int eng_cuda_check_layout(const eng_config *c, eng_err *e);

// Activations of one layer for one micro-batch of n = B*T rows (the fields
// of exec/layer.h's eng_layer_acts, bf16 except the fp32 statistics).
typedef struct eng_cuda_layer_acts {
  eng_bf16 *xn1; float *rstd1;     // [n,d], [n]
  eng_bf16 *qpre, *kpre;           // Qwen3 only: [n,H*hd], [n,KV*hd]
  float *rstdq, *rstdk;            // Qwen3 only: [n*H], [n*KV]
  eng_bf16 *q, *k, *v;             // after norm and RoPE
  eng_bf16 *att; float *lse;       // [n,H*hd], [B,H,T]
  eng_bf16 *graw, *attg;           // output gate (Qwen3.5): its projection, att·sigmoid [n,H*hd] x2
  eng_bf16 *xmid;                  // [n,d]
  eng_bf16 *xn2; float *rstd2;     // [n,d], [n]
  eng_bf16 *gate, *up, *hact;      // [n,ff] x3
} eng_cuda_layer_acts;

// A Gated DeltaNet layer's (exec/layer_dn.h's eng_dn_acts; kt, vt its key and
// value widths, C = 2kt + vt, P = C + vt + 2Hv, the rule's states fp32 at each
// 64-token chunk's start). No kernel binds them yet: they size the arena.
typedef struct eng_cuda_dn_acts {
  eng_bf16 *xn1; float *rstd1;     // [n,d], [n]
  eng_bf16 *p;                     // [n,P]
  eng_bf16 *u, *cy;                // conv before and after SiLU [n,C] x2
  eng_bf16 *qn, *kn; float *rq, *rk; // [n,kt] x2, [n*Hk] x2
  float *g, *beta;                 // [n,Hv] x2
  float *states;                   // [B,Hv,ceil(T/64),dk,dv]
  eng_bf16 *o; float *rn; eng_bf16 *gn; // [n,vt], [n*Hv], [n,vt]
  eng_bf16 *xmid;                  // [n,d]
  eng_bf16 *xn2; float *rstd2;     // [n,d], [n]
  eng_bf16 *gate, *up, *hact;      // [n,ff] x3
} eng_cuda_dn_acts;
typedef struct eng_cuda_dn_scratch {
  eng_bf16 *dff1, *dff2, *dff3;    // [n,ff] x3
  eng_bf16 *dxn, *dxmid;           // [n,d] x2
  eng_bf16 *dgn, *dout;            // [n,vt] x2
  eng_bf16 *dqn, *dkn, *dcy;       // [n,kt] x2, [n,C]
  float *dg, *dbeta;               // [n,Hv] x2
  eng_bf16 *dp;                    // [n,P]
  float *ds;                       // the rule's state gradient within a chunk [B,Hv,dk,dv]
} eng_cuda_dn_scratch;

// Scratch of the backward for one micro-batch.
typedef struct eng_cuda_layer_scratch {
  eng_bf16 *dff1, *dff2, *dff3;    // [n,ff] x3
  eng_bf16 *dxn, *dxmid;           // [n,d] x2
  eng_bf16 *datt, *dq, *dk, *dv;   // [n,H*hd] x2, [n,KV*hd] x2
  void *attn;                      // eng_cuda_attention_bwd's scratch
} eng_cuda_layer_scratch;

// Device bytes of the structs above for B sequences of T, and binding them
// to a region of that size (256-byte aligned base; every field is).
// A hybrid's (eng_config.full_every) are the larger of its two kinds'.
size_t eng_cuda_layer_acts_bytes(const eng_config *c, int B, int T);
size_t eng_cuda_layer_scratch_bytes(const eng_config *c, int B, int T);
void eng_cuda_layer_acts_bind(eng_cuda_layer_acts *a, void *base, const eng_config *c, int B, int T);
void eng_cuda_layer_scratch_bind(eng_cuda_layer_scratch *s, void *base, const eng_config *c, int B, int T);

// y = layer(x) on cx's stream; w is the layer shard in bf16 with the
// offsets of lo->layer_proto (the fp32 shard's layout, element for element).
// pos: the tokens' position ids [B][T] on the device, or NULL (0..T-1).
int eng_cuda_layer_fwd(eng_cuda_ctx *cx, const eng_config *c, const eng_layout *lo, const eng_bf16 *w,
                       const eng_bf16 *x, eng_bf16 *y, const int32_t *pos, int B, int T,
                       const eng_cuda_layer_acts *a, eng_err *e);
// Given acts from eng_cuda_layer_fwd on the same x and pos: dx (written) from
// dy, and the layer's weight gradients accumulated into dw (fp32, the shard
// layout). dx may alias dy.
int eng_cuda_layer_bwd(eng_cuda_ctx *cx, const eng_config *c, const eng_layout *lo, const eng_bf16 *w, float *dw,
                       const eng_bf16 *x, const eng_cuda_layer_acts *a, const eng_bf16 *dy, eng_bf16 *dx,
                       const int32_t *pos, int B, int T, const eng_cuda_layer_scratch *s, eng_err *e);

// ---- POET-X (poet/poet.h's math of one weight) -----------------------------------

// poet.h's functions on the GPU, in its argument order with cx (or a stream)
// added and e last: the Cayley–Neumann map θ → R and its backward, the block
// rotations, the permutations, and one weight's forward and backward. The
// math, the layouts (θ as each block's strict upper triangle, row-major; R
// and dL/dR as [nblk][b][b]; rows ld floats apart) and the add flags are
// poet.h's. Where they differ from poet.h:
// - fp32 throughout, not bf16: θ, R, dL/dR and dθ (a bf16 R would be
//   orthogonal only to about 2^-8, worse than the series' own error), and
//   the activations x, y, z, dx, dy, so that the chain matches the cpu's to
//   fp32 rounding (a bf16 layer converts at its edges: eng_cuda_bf16_to_f32
//   and back). Only the frozen W0 and bias are bf16 (the layer shard's
//   working copy), widened exactly where used. Products are cuBLASLt fp32
//   GEMMs without TF32, a rotation's (or the map's) blocks one strided
//   batch; the results are the cpu's within fp32 rounding, not its bits
//   (another summation order).
// - work is device bytes from the *_work_bytes functions (a 256-byte
//   aligned base), and the map's work covers all its blocks, not one.
// - Not here: orth_err, perm, effective, rebase and merge (the update,
//   which merges, runs on the host: DESIGN §2), and the layer (eng_poet_layer).
// - The fast mode (z kept) and the memory mode give the same bits when the
//   kept z is 256-byte aligned, as the work's own pieces are: the products
//   then have the same shapes and alignments, so cuBLASLt runs the same plans.

// R[nblk][b][b] from theta[nblk][tri(b)], cayley.c's Horner form of
// R = I + 2Q + 2Q² + 2Q³ + Q⁴.
size_t eng_cuda_poet_cayley_work_bytes(int nblk, int b);
int eng_cuda_poet_cayley(eng_cuda_ctx *cx, int nblk, int b, const float *theta, float *R, void *work, eng_err *e);
// dtheta[nblk][tri(b)] += dL/dθ for dR = dL/dR at theta.
size_t eng_cuda_poet_cayley_bwd_work_bytes(int nblk, int b);
int eng_cuda_poet_cayley_bwd(eng_cuda_ctx *cx, int nblk, int b, const float *theta, const float *dR, float *dtheta,
                             void *work, eng_err *e);

// y = x · diag(R) (trans 0) or x · diag(R)ᵀ (trans 1) over T rows of dim
// values; y must not overlap x.
int eng_cuda_poet_rotate(eng_cuda_ctx *cx, int T, int dim, int b, const float *x, int ldx, const float *R, int trans,
                         float *y, int ldy, eng_err *e);
// dR[k] += x_kᵀ · dy_k over the T rows.
int eng_cuda_poet_rotate_dR(eng_cuda_ctx *cx, int T, int dim, int b, const float *x, int ldx, const float *dy,
                            int ldy, float *dR, eng_err *e);
// y[t, j] = x[t, perm[j]] (gather) and x[t, perm[j]] = y[t, j] (scatter;
// add = 1: +=); perm (int32, on the device) must be a permutation of
// 0..dim-1, which is what lets the scatter add without atomics.
int eng_cuda_poet_gather(int T, int dim, const int32_t *perm, const float *x, int ldx, float *y, int ldy,
                         eng_cuda_stream s, eng_err *e);
int eng_cuda_poet_scatter(int T, int dim, const int32_t *perm, const float *y, int ldy, float *x, int ldx, int add,
                          eng_cuda_stream s, eng_err *e);

// One weight (poet.h's eng_poet_weight with a bf16 W0 and bias).
typedef struct eng_cuda_poet_weight {
  int m, n, b;                // out, in, block size
  const eng_bf16 *W0;         // [m, n]
  const eng_bf16 *bias;       // [m], or NULL
  const int32_t *pin, *pout;  // [n], [m]
  const float *Rin, *Rout;    // [n/b][b][b], [m/b][b][b] (eng_cuda_poet_cayley)
} eng_cuda_poet_weight;

// Work bytes of the forward and the backward for T rows (W0 widened to
// fp32, m·n floats, and the chain's intermediates).
size_t eng_cuda_poet_fwd_work_bytes(const eng_cuda_poet_weight *w, int T);
size_t eng_cuda_poet_bwd_work_bytes(const eng_cuda_poet_weight *w, int T);
// y [T, m] (rows ldy apart) for x [T, n] (rows ldx apart), plus bias; z
// (NULL, or [T, m] contiguous) keeps the product before the output rotation
// for the backward (the fast mode).
int eng_cuda_poet_forward(eng_cuda_ctx *cx, const eng_cuda_poet_weight *w, int T, const float *x, int ldx, float *y,
                          int ldy, float *z, void *work, eng_err *e);
// For dy [T, m]: dx [T, n] (add = 0: =, 1: +=) and dRin, dRout (+=, the
// blocks' dL/dR for eng_cuda_poet_cayley_bwd); x as the forward had it, z
// its kept product or NULL.
int eng_cuda_poet_backward(eng_cuda_ctx *cx, const eng_cuda_poet_weight *w, int T, const float *x, int ldx,
                           const float *z, const float *dy, int lddy, float *dx, int lddx, int add, float *dRin,
                           float *dRout, void *work, eng_err *e);

#ifdef __cplusplus
}
#endif

#endif
