// One Gated DeltaNet layer (Qwen3.5's linear_attention decoder layer) on the
// cpu, forward and backward, composed from the kernels:
//   x ─ norm ─ [qkv|z|b|a] proj ─ conv+SiLU(qkv) ─ L2(q), L2(k) ─┐
//        β = sigmoid(b), g = −exp(A_log)·softplus(a + dt_bias) ──┴ delta rule
//        ─ gated RMSNorm(·, z) ─ out proj ─(+x)= xmid
//   xmid ─ norm ─ gate,up proj ─ SwiGLU ─ down proj ─(+xmid)= y
// The two layer norms are zero-centred, x̂·(1 + w), as Qwen3.5's are; the
// gated norm's weight multiplies as it is. w is the layer's shard laid out
// as eng_layout_dn_proto's prototype `proto` says. As in exec/layer.h, the
// forward keeps in an eng_dn_acts what the backward needs (the rule's state
// at each chunk's start, not at every token); pos marks packed records, at
// whose start the rule's state and the conv's window begin anew.
#ifndef ENG_EXEC_LAYER_DN_H
#define ENG_EXEC_LAYER_DN_H

#include <stdint.h>

#include "model/layout.h"

typedef struct eng_dn_acts {
  float *w1, *w2;            // 1 + the two layer norms' weights              [d], [d]
  float *xn1, *rstd1;        // mixer norm output, 1/rms                      [n,d], [n]
  float *p;                  // the q|k|v|z|b|a projection                    [n, 2kt+2vt+2Hv]
  float *u, *cy;             // conv before and after SiLU                    [n, 2kt+vt]
  float *qn, *kn, *rq, *rk;  // L2-normalised q, k and their 1/norm           [n,kt], [n,kt], [n·Hk]
  float *g, *beta;           // log decay and β per value head                [n,Hv]
  float *states;             // the rule's state at each chunk's start
  float *o, *rn, *gn;        // rule output, the gated norm's 1/rms and output [n,vt], [n·Hv], [n,vt]
  float *xmid;               // residual after the mixer                      [n,d]
  float *xn2, *rstd2;        // MLP norm output and 1/rms                     [n,d], [n]
  float *gu, *hact;          // gate|up projections, silu(gate)*up            [n,2ff], [n,ff]
} eng_dn_acts;

typedef struct eng_dn_scratch {
  float *dh, *dgu, *dxn, *dxmid;   // [n,ff], [n,2ff], [n,d], [n,d]
  float *dgn, *dout, *dnorm;       // [n,vt] each (dnorm: the gated norm's scratch)
  float *dqn, *dkn, *dcy;          // [n,kt], [n,kt], [n,2kt+vt]
  float *dg, *dbeta;               // [n,Hv]
  float *dp;                       // [n, 2kt+2vt+2Hv]
} eng_dn_scratch;

// Floats of the acts and the scratch for B sequences of T.
size_t eng_dn_acts_floats(const eng_config *c, int B, int T);
size_t eng_dn_scratch_floats(const eng_config *c, int B, int T);
void eng_dn_acts_bind(eng_dn_acts *a, float *buf, const eng_config *c, int B, int T);
void eng_dn_scratch_bind(eng_dn_scratch *s, float *buf, const eng_config *c, int B, int T);

// y = layer(x) for B sequences of T tokens (pos: kernels.h, NULL for 0..T-1).
void eng_dn_layer_fwd(const eng_config *c, const eng_tensor *proto, const float *w, const float *x, float *y,
                      const int32_t *pos, int B, int T, eng_dn_acts *a);
// Given acts from the forward on the same x and pos: dx written, the
// layer's weight gradients added into dw (laid out like w).
void eng_dn_layer_bwd(const eng_config *c, const eng_tensor *proto, const float *w, float *dw, const float *x,
                      const eng_dn_acts *a, const float *dy, float *dx, const int32_t *pos, int B, int T,
                      eng_dn_scratch *s);

#endif
