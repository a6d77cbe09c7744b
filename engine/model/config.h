// Model configuration of the decoder-only transformers the engine trains, of
// the families of the architecture table (model/arch.h). Numbers and the
// tensors a layer holds; what a family means is its row. Read from and
// written to Hugging Face config.json.
#ifndef ENG_MODEL_CONFIG_H
#define ENG_MODEL_CONFIG_H

#include "common/err.h"
#include "common/fs_open.h"
#include "model/arch.h"

// RoPE's frequencies (rope_parameters' rope_type; model/rope.h computes them).
typedef enum { ENG_ROPE_DEFAULT = 0, ENG_ROPE_LINEAR, ENG_ROPE_LLAMA3, ENG_ROPE_YARN, ENG_ROPE_TYPES } eng_rope_type;

typedef struct eng_config {
  eng_arch arch;
  int vocab;          // vocab_size
  int d_model;        // hidden_size
  int n_layers;       // num_hidden_layers
  int n_heads;        // num_attention_heads
  int n_kv_heads;     // num_key_value_heads (defaults to n_heads)
  int head_dim;       // head_dim (defaults to d_model / n_heads); Qwen3 may differ
  int d_ff;           // intermediate_size
  int max_pos;        // max_position_embeddings
  float rope_theta;   // rope_theta (rope_parameters.rope_theta in newer configs)
  struct {            // rope_parameters' (or the older rope_scaling's) scaling
    int type;         // eng_rope_type
    float factor;     // linear, llama3, yarn: the frequencies' divisor
    float low_freq_factor, high_freq_factor; // llama3
    int original_max_pos;                    // llama3, yarn: original_max_position_embeddings
    // yarn; 0 where the file leaves a key out (transformers' defaults then:
    // attention_factor from factor and the mscales, beta_fast 32, beta_slow 1)
    float attention_factor, beta_fast, beta_slow, mscale, mscale_all_dim;
    int no_truncate;                         // yarn: "truncate": false
  } rope;
  float rms_eps;      // rms_norm_eps
  float init_std;     // initializer_range, for random init
  int tie_embeddings; // tie_word_embeddings
  int qkv_bias;       // the row's: q, k, v projections carry a bias (eng_arch_apply)
  int qk_norm;        // the row's: RMSNorm over head_dim on q and k (eng_arch_apply)
  int attn_gate;      // q_proj also gives a gate per head: att·sigmoid(gate) before o_proj (Qwen3.5)
  int norm_plus_one;  // the norms are zero-centred, x̂·(1 + w) (Qwen3.5)
  int rope_dim;       // the dims of a head RoPE rotates (partial_rotary_factor·head_dim); 0: head_dim
  int window;         // sliding_window: a query sees its last `window` keys; 0: all (causal)
  int full_every;     // hybrid (Qwen3.5): layer l is attention when (l+1) % full_every == 0,
                      // else Gated DeltaNet; 0: every layer is attention
  int vlm;            // the text model of its row's multimodal checkpoint (arch.h's vlm_*):
                      // config.json nests it under text_config, its tensors are named
                      // with the row's vlm_prefix, and the checkpoint's vision and MTP
                      // tensors pass through untouched
  struct {            // Gated DeltaNet (Qwen3.5's linear_attention layers); 0 where none
    int k_heads, v_heads; // linear_num_key_heads, linear_num_value_heads
    int k_dim, v_dim;     // linear_key_head_dim, linear_value_head_dim
    int conv;             // linear_conv_kernel_dim
  } dn;
} eng_config;

// Fills c from a Hugging Face config.json. Unknown architectures, missing
// required fields and features the engine does not implement (rope_scaling,
// MoE, non-silu activations, and the keys the family's row refuses, e.g.
// sliding-window attention, attention/MLP bias on Llama) are refused with an error naming the file and the field, as
// are token ids (bos_token_id, eos_token_id, pad_token_id) that are not an
// integer or null (eos_token_id: or a list of integers). The file is opened
// under fs (common/fs_open.h; NULL: anywhere).
int eng_config_load(const eng_fs *fs, const char *path, eng_config *c, eng_err *e);

// Writes c as a config.json that transformers loads (architectures,
// model_type, torch_dtype = dtype_name, e.g. "float32" or "bfloat16").
// ids_from, when not NULL, is the config.json the model came from: its
// token ids (bos_token_id, eos_token_id, pad_token_id) are written as they
// are there, since eng_config does not hold them; it is read under ids_fs.
// The text model of a multimodal checkpoint (c->vlm) is written into the
// source's config.json, ids_from, as its text_config (so ids_from is needed).
int eng_config_save(const eng_config *c, const char *path, const char *dtype_name,
                    const eng_fs *ids_fs, const char *ids_from, eng_err *e);

// Checks internal consistency (positive sizes, heads divisible by kv heads,
// the layer tensors the architecture's row implies).
// `what` names the source in the message (a path or "spec").
int eng_config_validate(const eng_config *c, const char *what, eng_err *e);

#endif
