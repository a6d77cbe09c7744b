// The architecture table: one row per model family the engine trains, and
// everything that differs between families as data in that row (DESIGN §7
// "Extending"). Code that must know what a family means reads its row;
// nothing else compares eng_arch values.
//
// A row says what config.json's model_type and architectures name it, what
// transformers assumes for keys a file leaves out, which tensors its layers
// hold, which of its config keys turn on features the engine refuses (and
// how an export writes them off), and what the README's table of
// architectures says of it (traind-train --archs prints that table; a test
// compares it with the README).
#ifndef ENG_MODEL_ARCH_H
#define ENG_MODEL_ARCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

// Stable numbers: checkpoints store them (engine.c's meta) and the daemon's
// proto names them (Arch = eng_arch + 1). A new family takes the next number.
typedef enum {
  ENG_ARCH_LLAMA = 0,
  ENG_ARCH_QWEN2 = 1,
  ENG_ARCH_QWEN3 = 2,
  ENG_ARCH_QWEN3_5 = 3,
  ENG_ARCH_MISTRAL = 4,
  ENG_ARCH_COUNT
} eng_arch;

// A boolean config key whose true the engine refuses; `what` completes
// "... is true: <what> is not supported". Exports write it false.
typedef struct eng_arch_refusal {
  const char *key, *what;
} eng_arch_refusal;

// A hybrid family (Qwen3.5): Gated DeltaNet layers, every full_every-th
// layer gated full attention (q_proj with a gate per head, q/k norms,
// partial RoPE), zero-centred norms. transformers' defaults for its keys:
typedef struct eng_arch_hybrid {
  int k_heads, v_heads, k_dim, v_dim, conv; // linear_num_key_heads, ..._value_heads, linear_key_head_dim,
                                            // linear_value_head_dim, linear_conv_kernel_dim
  int full_every;                           // full_attention_interval (when layer_types is absent)
  float partial_rotary;                     // partial_rotary_factor
} eng_arch_hybrid;

typedef struct eng_arch_row {
  const char *model_type;     // config.json "model_type", traind-train --arch
  const char *hf_class;       // the "architectures" entry transformers loads
  const char *layer;          // the README's words for one layer
  // transformers' defaults for keys a config.json leaves out
  int kv_heads_absent;        // num_key_value_heads absent (not null); 0: the attention heads
  int head_dim_absent;        // head_dim absent; 0: hidden_size / num_attention_heads
  int max_pos_absent;         // max_position_embeddings absent
  // tensors of a layer beyond the Llama layer's
  uint8_t qkv_bias;           // q, k and v projections carry a bias
  uint8_t qk_norm;            // RMSNorm over head_dim on q and k, before RoPE
  // what its transformers config class accepts
  uint8_t heads_divide_hidden; // hidden_size must be a multiple of num_attention_heads
  uint8_t layer_types;         // "layer_types" may be present (every entry full_attention)
  const eng_arch_refusal *refuse; // ends with {NULL}
  const char *const *save_null;   // keys an export writes null; ends with NULL
  const eng_arch_hybrid *hybrid;  // NULL: every layer is attention
  // Sliding-window attention of every layer (eng_config.window): the key
  // that sizes it (NULL: the family has none), and what transformers takes
  // when the key is absent (0: none).
  const char *window_key;
  int window_absent;
  // The multimodal checkpoint that wraps this text model (NULL: none): its
  // config.json's model_type and class, the text model's config nested under
  // "text_config", the text model's tensors under vlm_prefix instead of
  // "model." (lm_head keeps its name), and the tensors it holds beside them
  // (a vision tower, multi-token prediction), by name prefix: the engine
  // neither loads nor trains them, and an export copies them byte for byte.
  const char *vlm_type, *vlm_class, *vlm_prefix;
  const char *const *vlm_pass; // ends with NULL
} eng_arch_row;

// The row of a (NULL for a value outside the table).
const eng_arch_row *eng_arch_row_of(eng_arch a);
// The family whose model_type (by_class 0) or hf_class (by_class 1) is s; -1 if none.
int eng_arch_find(const char *s, int by_class);
// The family whose multimodal wrapper's vlm_type (by_class 0) or vlm_class (1) is s; -1 if none.
int eng_arch_find_vlm(const char *s, int by_class);
// model_type, or "unknown" outside the table.
const char *eng_arch_name(eng_arch a);
// Writes "llama, qwen2, qwen3" (by_class 0) or the class names (1) into
// buf[n] for messages, sep between entries (e.g. ", " or " | "); returns buf.
char *eng_arch_list(char *buf, size_t n, int by_class, const char *sep);

// Sets c->arch to a and the tensors its layers hold (qkv_bias, qk_norm; a
// hybrid's attn_gate and norm_plus_one) from the row: every eng_config that
// names an architecture gets them this way.
struct eng_config;
void eng_arch_apply(struct eng_config *c, eng_arch a);

// The README's table of architectures (markdown), from the rows.
void eng_arch_print_table(FILE *f);

#endif
