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

static double layer_matrix_numel(const eng_config *c) {
  eng_layout lo;
  eng_layout_init(&lo, c);
  return proto_matrix_numel(lo.layer_proto);
}

// A Gated DeltaNet layer's state work per token in its forward: three
// products with each value head's state S [kd, vd] (read Sᵀk, write k·uᵀ,
// output Sᵀq), 2 FLOPs per element each.
static double dn_state_flops(const eng_config *c) {
  return 6.0 * c->dn.v_heads * c->dn.k_dim * c->dn.v_dim;
}

eng_layer_flops eng_flops_layer_fwd(const eng_config *c, double seqs, double T) {
  eng_layer_flops f;
  f.gemm = 2.0 * seqs * T * layer_matrix_numel(c);
  f.attn = 2.0 * seqs * c->n_heads * T * T * c->head_dim;
  return f;
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
  // A hybrid's layers: L attention layers, Ld Gated DeltaNet ones.
  double L = 0, Ld = 0;
  for (int l = 0; l < c->n_layers; l++) *(eng_layout_kind(&lo, l) == ENG_KIND_DN ? &Ld : &L) += 1;
  eng_layer_flops one = eng_flops_layer_fwd(c, B, T), seq = eng_flops_layer_fwd(c, 1, T);
  const double dn_mat = Ld ? proto_matrix_numel(lo.dn_proto) : 0, dn_state = Ld ? dn_state_flops(c) : 0;
  const double head = V * d; // the LM head's matrix, tied or not
  const double n_mat = L * layer_matrix_numel(c) + Ld * dn_mat + head;
  out->model = tokens * (6.0 * n_mat + 12.0 * L * c->n_heads * c->head_dim * T + 3.0 * Ld * dn_state);
  // Executed: each layer's forward and backward (dX and dW: twice the
  // forward's products; a DN layer's state work thrice more: the backward
  // replays each chunk's forward and then takes about twice its products);
  // the head's logits, dh and dW, 2 FLOPs each per token per element of its
  // matrix. refwd: the layers' mean, one sequence.
  const double fwd_bwd_attn = (1.0 + ENG_FLOPS_ATTN_BWD_RATIO) * one.attn;
  const double dn_fwd = tokens * (2.0 * dn_mat + dn_state);
  out->refwd = (L * (seq.gemm + seq.attn) + Ld * T * (2.0 * dn_mat + dn_state)) / (L + Ld);
  out->merge = 0;
  out->fwd = L * (one.gemm + one.attn) + Ld * dn_fwd + 2.0 * tokens * head;
  if (poet_block <= 0) {
    out->exec = L * (3.0 * one.gemm + fwd_bwd_attn) + Ld * tokens * (6.0 * dn_mat + 4.0 * dn_state) +
                6.0 * tokens * head;
    return 0;
  }
  eng_poet_model pm;
  int rc = eng_poet_model_shape(&pm, &lo, poet_block, e);
  if (rc) return rc;
  eng_poet_flops p = eng_flops_poet_layer(&pm, tokens, poet_fast);
  eng_poet_flops p1 = eng_flops_poet_layer(&pm, T, poet_fast);
  // The forward and dX, no dW0: 2 products, plus the rotations.
  out->exec = L * (2.0 * one.gemm + fwd_bwd_attn + p.fwd + p.bwd + p.z_bwd + p.cayley + p.cayley_bwd) +
              6.0 * tokens * head;
  out->refwd += p1.fwd;
  out->fwd += L * (p.fwd + p.cayley);
  out->merge = L * p.merge;
  return 0;
}
