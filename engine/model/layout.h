// Parameter layout: where every tensor of the model lives.
//
// The model is a sequence of shards, each one contiguous array of floats that
// streams as a unit (DESIGN §2):
//   shard 0          the embedding table [vocab, d]
//   shard 1 .. L     transformer layer l-1 (norms, attention or Gated DeltaNet, MLP)
//   shard L + 1      the head: final norm [d] and, when untied, lm_head [vocab, d]
// A tensor absent from a configuration (biases on Llama, q/k norms outside
// Qwen3, lm_head when tied) has numel 0. Matrices are row-major [rows, cols]
// exactly as Hugging Face stores them (nn.Linear weight is [out, in]).
#ifndef ENG_MODEL_LAYOUT_H
#define ENG_MODEL_LAYOUT_H

#include <stddef.h>

#include "model/config.h"

typedef enum {
  ENG_P_ATTN_NORM, // input_layernorm.weight            [d]
  ENG_P_WQ,        // self_attn.q_proj.weight           [H*hd, d]
  ENG_P_BQ,        // self_attn.q_proj.bias             [H*hd]      (qwen2)
  ENG_P_WK,        // self_attn.k_proj.weight           [KV*hd, d]
  ENG_P_BK,        // self_attn.k_proj.bias             [KV*hd]     (qwen2)
  ENG_P_WV,        // self_attn.v_proj.weight           [KV*hd, d]
  ENG_P_BV,        // self_attn.v_proj.bias             [KV*hd]     (qwen2)
  ENG_P_QNORM,     // self_attn.q_norm.weight           [hd]        (qwen3)
  ENG_P_KNORM,     // self_attn.k_norm.weight           [hd]        (qwen3)
  ENG_P_WO,        // self_attn.o_proj.weight           [d, H*hd]
  ENG_P_MLP_NORM,  // post_attention_layernorm.weight   [d]
  ENG_P_WGATE,     // mlp.gate_proj.weight              [ff, d]
  ENG_P_WUP,       // mlp.up_proj.weight                [ff, d]
  ENG_P_WDOWN,     // mlp.down_proj.weight              [d, ff]
  // A Gated DeltaNet layer (Qwen3.5's linear_attention) has these in place
  // of the attention's, kt = dn.k_heads·dn.k_dim, vt = dn.v_heads·dn.v_dim:
  ENG_P_DN_QKV,    // linear_attn.in_proj_qkv.weight    [2kt+vt, d]
  ENG_P_DN_Z,      // linear_attn.in_proj_z.weight      [vt, d]
  ENG_P_DN_B,      // linear_attn.in_proj_b.weight      [Hv, d]
  ENG_P_DN_A,      // linear_attn.in_proj_a.weight      [Hv, d]
  ENG_P_DN_CONV,   // linear_attn.conv1d.weight         [2kt+vt, 1, K] (rows, cols = K)
  ENG_P_DN_DT,     // linear_attn.dt_bias               [Hv]
  ENG_P_DN_ALOG,   // linear_attn.A_log                 [Hv]
  ENG_P_DN_NORM,   // linear_attn.norm.weight           [dn.v_dim]
  ENG_P_DN_OUT,    // linear_attn.out_proj.weight       [d, vt]
  ENG_P_LAYER_COUNT
} eng_layer_param;

typedef struct eng_tensor {
  size_t off;        // offset in floats inside its shard
  size_t numel;      // 0 when the configuration has no such tensor
  int rows, cols;    // cols == 0 for vectors
  int mid1;          // Hugging Face stores it [rows, 1, cols] (a depthwise conv's weight)
  char name[96];     // Hugging Face name, e.g. "model.layers.3.mlp.up_proj.weight"
} eng_tensor;

// A layer's kind: attention, or (in a hybrid, eng_config.full_every > 0)
// Gated DeltaNet, with every full_every-th layer attention (Qwen3.5).
typedef enum { ENG_KIND_ATTN = 0, ENG_KIND_DN = 1 } eng_layer_kind;

typedef struct eng_layout {
  int n_layers;
  int n_shards;                             // n_layers + 2
  int full_every;                           // eng_config's: 0, every layer is attention
  const char *prefix;                       // of the names: "model.", or a multimodal
                                            // checkpoint's (eng_config.vlm: the row's vlm_prefix)
  const char *const *pass;                  // name prefixes of the checkpoint's tensors that
                                            // pass through (the row's vlm_pass), or NULL
  size_t layer_numel;                       // floats in an attention layer's shard
  eng_tensor layer_proto[ENG_P_LAYER_COUNT]; // an attention layer: offsets and shapes, names for layer 0
  size_t dn_numel;                          // the same for a Gated DeltaNet layer (0 in none)
  eng_tensor dn_proto[ENG_P_LAYER_COUNT];
  eng_tensor embed;                          // shard 0, "<prefix>embed_tokens.weight"
  eng_tensor final_norm;                     // shard L+1, "<prefix>norm.weight"
  eng_tensor lm_head;                        // shard L+1 after final_norm, numel 0 when tied
  size_t head_numel;                         // floats in the head shard
  size_t total_numel;                        // every parameter, counted once
} eng_layout;

void eng_layout_init(eng_layout *lo, const eng_config *c);

// The prototype of a Gated DeltaNet layer of c (names for layer 0): the
// norms and MLP as an attention layer's, the DN tensors instead of the
// attention's; returns its floats (eng_layout_init's dn_proto).
size_t eng_layout_dn_proto(eng_tensor proto[ENG_P_LAYER_COUNT], const eng_config *c);

// Floats in shard s.
size_t eng_layout_shard_numel(const eng_layout *lo, int s);

// Layer l's kind and its prototype (offsets and shapes; names for layer 0).
eng_layer_kind eng_layout_kind(const eng_layout *lo, int l);
const eng_tensor *eng_layout_proto(const eng_layout *lo, int l);

// Describes tensor p of layer l (its name carries l).
eng_tensor eng_layout_layer_tensor(const eng_layout *lo, int l, eng_layer_param p);

// t's shape as Hugging Face stores it, into shape[3]; returns its dims (1-3).
int eng_tensor_hf_shape(const eng_tensor *t, int64_t shape[3]);

// Finds a tensor by its Hugging Face name: returns 0 and fills *shard and *t,
// or -1 when the name is not part of this configuration.
int eng_layout_find(const eng_layout *lo, const char *name, int *shard, eng_tensor *t);

// Whether name is a tensor of the checkpoint that passes through (lo->pass).
int eng_layout_passes(const eng_layout *lo, const char *name);

// Calls fn for every tensor of the model in Hugging Face order (embedding,
// layers, final norm, lm_head). Stops and returns fn's value when it is nonzero.
typedef int (*eng_layout_visit_fn)(void *ctx, int shard, const eng_tensor *t);
int eng_layout_visit(const eng_layout *lo, eng_layout_visit_fn fn, void *ctx);

#endif
