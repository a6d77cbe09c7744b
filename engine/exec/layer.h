// One transformer layer's forward and backward, composed from the kernels:
//   x ─ RMSNorm ─ q,k,v proj (+bias) ─ [q/k RMSNorm] ─ RoPE ─ attention ─ [gate] ─ o proj ─(+x)= xmid
//   xmid ─ RMSNorm ─ gate,up proj ─ SwiGLU ─ down proj ─(+xmid)= y
// The forward keeps what the backward needs in an eng_layer_acts of one
// micro-batch. Qwen3.5's full-attention layer is the same with its flags
// (eng_config: attn_gate, norm_plus_one, rope_dim). The executor recomputes
// it from the layer's input before the backward (activation checkpointing
// at layer granularity). Under POET-X
// (poet non-NULL) the seven products are the weights' POET chains
// (poet/poet.h; with acts.z the fast mode, else the memory mode, where the
// backward recomputes each chain's inner product from its input, which the
// acts keep anyway: the same bits either way), the backward adds dL/dR
// into poet's accumulators instead of weight gradients, and the biases stay
// frozen; the norms train as before.
#ifndef ENG_EXEC_LAYER_H
#define ENG_EXEC_LAYER_H

#include <stdint.h>

#include "backend/backend.h"
#include "model/layout.h"
#include "poet/poet.h"

// Activations of one layer for one micro-batch of n = B*T rows.
typedef struct eng_layer_acts {
  float *xn1, *rstd1;        // attention norm output and its 1/rms    [n,d], [n]
  float *qkv;                // the q|k|v projection                    [n,(H+2KV)*hd]
  float *rstdq, *rstdk;      // 1/rms of the q/k norm (Qwen3 only)     [n*H], [n*KV]
  float *q, *k, *v;          // attention's inputs (after norm and RoPE), rows ldq/ldk/ldv
  int ldq, ldk, ldv;         //   apart: views into qkv, or q and k of their own (Qwen3)
  float *att, *lse;          // attention output, log-sum-exp           [n,H*hd], [B,H,T]
  float *attg;               // att·sigmoid(gate) (Qwen3.5's output gate) [n,H*hd], or NULL
  float *xmid;               // residual after attention                [n,d]
  float *xn2, *rstd2;        // MLP norm output and 1/rms               [n,d], [n]
  float *gu, *hact;          // gate|up projections, silu(gate)*up      [n,2ff], [n,ff]
  float *w1, *w2, *wq, *wk;  // zero-centred norms: 1 + the norms' weights [d],[d],[hd],[hd]; else NULL
  float *z;                  // POET-X's fast mode: each chain's product before its output
                             // rotation, weight by weight (q, k, v, o, gate, up, down), [n, out]
                             // each; NULL: the backward recomputes them (the memory mode)
} eng_layer_acts;

// Scratch of the backward for one micro-batch.
typedef struct eng_layer_scratch {
  float *dh, *dgu;           // d hact, d gate|up                       [n,ff], [n,2ff]
  float *dxn;                // [n,d]   d of a norm output (reused by both norms)
  float *dxmid;              // [n,d]
  float *datt;               // [n,H*hd]
  float *dqkv;               // [n,(H+2KV)*hd] d of the q|k|v projection
  float *dq, *dk, *dv;       // laid out like the acts' q, k, v: views into dqkv or own (Qwen3)
} eng_layer_scratch;

// Floats needed by eng_layer_acts / eng_layer_scratch for B sequences of T;
// POET-X's fast mode adds eng_layer_acts_z_floats to the acts (bound by the
// caller after the rest: a->z).
size_t eng_layer_acts_floats(const eng_config *c, int B, int T);
size_t eng_layer_acts_z_floats(const eng_config *c, int B, int T);
size_t eng_layer_scratch_floats(const eng_config *c, int B, int T);
// Point the fields into buf (sized by the functions above).
void eng_layer_acts_bind(eng_layer_acts *a, float *buf, const eng_config *c, int B, int T);
void eng_layer_scratch_bind(eng_layer_scratch *s, float *buf, const eng_config *c, int B, int T);

// y = layer(x) for B sequences of T tokens; w is the layer shard. pos: the
// tokens' position ids, [B][T] (kernels.h: documents packed in a row attend
// only within themselves), or NULL for 0..T-1 in every row.
void eng_layer_fwd(const eng_config *c, const eng_layout *lo, const float *w, const float *x,
                   float *y, const int32_t *pos, int B, int T, eng_layer_acts *a, const eng_poet_layer *poet);

// Given acts from eng_layer_fwd on the same x and pos, dy -> dx (written)
// and the layer's weight gradients accumulated into dw (the layer's
// gradient shard).
void eng_layer_bwd(const eng_config *c, const eng_layout *lo, const float *w, float *dw,
                   const float *x, const eng_layer_acts *a, const float *dy, float *dx,
                   const int32_t *pos, int B, int T, eng_layer_scratch *s, const eng_poet_layer *poet);

#endif
