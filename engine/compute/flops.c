#include "compute/flops.h"

#include "model/layout.h"

// Weights of a layer prototype's projections (its matrices; not norms or
// biases; a DN layer's conv counts, as its taps multiply every token).
static double proto_matrix_numel(const eng_tensor *proto) {
  double mat = 0;
  for (int p = 0; p < ENG_P_LAYER_COUNT; p++)
    if (proto[p].cols) mat += (double)proto[p].numel;
  return mat;
}

eng_layer_flops eng_flops_layer_fwd(const eng_config *c, int kind, double seqs, double T) {
  eng_layout lo;
  eng_layout_init(&lo, c);
  const double n = seqs * T;
  if (kind == ENG_KIND_DN)
    return (eng_layer_flops){.gemm = 2.0 * n * proto_matrix_numel(lo.dn_proto),
                             .mix = n * 6.0 * c->dn.v_heads * c->dn.k_dim * c->dn.v_dim,
                             .mix_bwd_ratio = ENG_FLOPS_DN_BWD_RATIO};
  // Query-key pairs of a sequence: the causal half, or under a window of W
  // keys the first W queries' triangle and W for each after.
  const double W = c->window;
  const double pairs = W <= 0 || W >= T ? T * T / 2 : W * W / 2 + (T - W) * W;
  return (eng_layer_flops){.gemm = 2.0 * n * proto_matrix_numel(lo.layer_proto),
                           .mix = 4.0 * seqs * c->n_heads * c->head_dim * pairs,
                           .mix_bwd_ratio = ENG_FLOPS_ATTN_BWD_RATIO};
}

eng_poet_flops eng_flops_poet_layer(const eng_poet_model *pm, double n, int fast) {
  eng_poet_flops w = {0};
  const double b = pm->b;
  for (int k = 0; k < ENG_POET_WEIGHTS; k++) {
    const double in = pm->dim[k][0], out = pm->dim[k][1];
    w.fwd += 2.0 * n * b * (in + out);
    w.bwd += 2.0 * n * b * (3.0 * in + 2.0 * out);
    w.z_bwd += fast ? 0.0 : 2.0 * n * in * out;
    w.cayley += (in + out) / b * 6.0 * b * b * b;
    w.merge += 2.0 * 2.0 * in * out * b;
  }
  w.cayley_bwd = 4.0 * w.cayley;
  return w;
}

int eng_flops_step(const eng_config *c, int batch, int seq_len, int poet_block, int poet_fast,
                   eng_step_flops *out, eng_err *e) {
  eng_layout lo;
  eng_layout_init(&lo, c);
  const double B = batch, T = seq_len, d = c->d_model, V = c->vocab;
  const double tokens = B * T;
  // PaLM's count knows no recompute, no causal mask and no window: attention
  // as if dense, the delta rule's state products as they are.
  const double head = V * d; // the LM head's matrix, tied or not
  double model = 6.0 * tokens * head, exec = 6.0 * tokens * head, refwd = 0;
  out->fwd = 2.0 * tokens * head;
  out->merge = 0;
  double count[2] = {0, 0}; // layers of each kind
  for (int l = 0; l < c->n_layers; l++) count[eng_layout_kind(&lo, l)] += 1;
  const double L = count[ENG_KIND_ATTN];
  for (int kind = 0; kind < 2; kind++) {
    if (!count[kind]) continue;
    const double n = count[kind];
    eng_layer_flops one = eng_flops_layer_fwd(c, kind, B, T), seq = eng_flops_layer_fwd(c, kind, 1, T);
    // PaLM counts attention dense, 12·H·Q·T per token, whatever the mask.
    model += n * (3.0 * one.gemm +
                  (kind == ENG_KIND_ATTN ? 12.0 * tokens * c->n_heads * c->head_dim * T : 3.0 * one.mix));
    // Executed: the forward, and the backward's dX and dW (twice the
    // forward's products) and its mixing.
    exec += n * (3.0 * one.gemm + (1.0 + one.mix_bwd_ratio) * one.mix);
    out->fwd += n * (one.gemm + one.mix);
    refwd += n * (seq.gemm + seq.mix) / c->n_layers; // the layers' mean, one sequence
  }
  out->model = model;
  out->exec = exec;
  out->refwd = refwd;
  if (poet_block <= 0) return 0;
  eng_poet_model pm;
  int rc = eng_poet_model_shape(&pm, &lo, poet_block, e);
  if (rc) return rc;
  // (Every layer is attention: eng_poet_model_shape refuses a hybrid.)
  eng_poet_flops p = eng_flops_poet_layer(&pm, tokens, poet_fast);
  eng_poet_flops p1 = eng_flops_poet_layer(&pm, T, poet_fast);
  eng_layer_flops one = eng_flops_layer_fwd(c, ENG_KIND_ATTN, B, T);
  // The forward and dX, no dW0: 2 products, plus the rotations.
  out->exec = L * (2.0 * one.gemm + (1.0 + one.mix_bwd_ratio) * one.mix + p.fwd + p.bwd + p.z_bwd + p.cayley +
                   p.cayley_bwd) +
              6.0 * tokens * head;
  out->refwd += p1.fwd;
  out->fwd += L * (p.fwd + p.cayley);
  out->merge = L * p.merge;
  return 0;
}
