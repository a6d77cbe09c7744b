#include "model/arch.h"

#include <string.h>

#include "model/config.h"

// The families, each as transformers 5's configuration and model classes
// define it (configuration_<family>.py for the defaults, modeling_<family>.py
// for the tensors).
static const eng_arch_refusal llama_refuse[] = {
    {"attention_bias", "a bias on the attention projections"},
    {"mlp_bias", "a bias on the MLP projections"},
    {NULL, NULL},
};
// Qwen2's q/k/v bias is always there (its config has no attention_bias);
// sliding_window alone is inert in both Qwen families, use_sliding_window
// turns it on.
static const eng_arch_refusal qwen2_refuse[] = {
    {"use_sliding_window", "sliding-window attention"},
    {NULL, NULL},
};
static const eng_arch_refusal qwen3_refuse[] = {
    {"attention_bias", "a bias on the attention projections"},
    {"use_sliding_window", "sliding-window attention"},
    {NULL, NULL},
};
// transformers 4.x warns about sliding windows whenever sliding_window is
// set, and its Qwen configs default it to 4096.
static const char *const qwen_save_null[] = {"sliding_window", NULL};
static const char *const none[] = {NULL};
static const eng_arch_refusal no_refusal[] = {{NULL, NULL}};
static const eng_arch_refusal qwen3_5_refuse[] = {
    {"attention_bias", "a bias on the attention projections"},
    {NULL, NULL},
};
// Qwen3_5ForConditionalGeneration: Qwen3_5Model's visual tower beside its
// language_model, and the checkpoints' MTP head (which transformers skips).
static const char *const qwen3_5_pass[] = {"model.visual.", "mtp.", NULL};
// Qwen3_5TextConfig's defaults.
static const eng_arch_hybrid qwen3_5_hybrid = {.k_heads = 16, .v_heads = 32, .k_dim = 128, .v_dim = 128,
                                               .conv = 4, .full_every = 4, .partial_rotary = 0.25f};

// What Qwen2Config and Qwen3Config share: 32 key/value heads and 32768
// positions when absent, layer_types accepted, sliding_window written null.
#define QWEN_CONFIG .kv_heads_absent = 32, .max_pos_absent = 32768, .layer_types = 1, .save_null = qwen_save_null

static const eng_arch_row rows[ENG_ARCH_COUNT] = {
    [ENG_ARCH_LLAMA] = {.model_type = "llama",
                        .hf_class = "LlamaForCausalLM",
                        .layer = "RMSNorm, GQA attention with RoPE, RMSNorm, SwiGLU MLP",
                        .max_pos_absent = 2048,
                        .heads_divide_hidden = 1,
                        .refuse = llama_refuse,
                        .save_null = none},
    [ENG_ARCH_QWEN2] = {.model_type = "qwen2",
                        .hf_class = "Qwen2ForCausalLM",
                        .layer = "Llama's, with a bias on the q, k and v projections",
                        QWEN_CONFIG,
                        .qkv_bias = 1,
                        .refuse = qwen2_refuse},
    [ENG_ARCH_QWEN3] = {.model_type = "qwen3",
                        .hf_class = "Qwen3ForCausalLM",
                        .layer = "Llama's, with RMSNorm on each q and k head before RoPE; head_dim "
                                 "independent of hidden_size",
                        QWEN_CONFIG,
                        .head_dim_absent = 128,
                        .qk_norm = 1,
                        .refuse = qwen3_refuse},
    [ENG_ARCH_QWEN3_5] = {.model_type = "qwen3_5_text",
                          .hf_class = "Qwen3_5ForCausalLM",
                          .layer = "Gated DeltaNet (conv, L2-normalised q and k, the gated delta rule, gated "
                                   "RMSNorm) or, every full_attention_interval-th layer, attention with q/k norms, "
                                   "partial RoPE and a sigmoid output gate; zero-centred norms; SwiGLU MLP",
                          .kv_heads_absent = 4,
                          .head_dim_absent = 256,
                          .max_pos_absent = 32768,
                          .qk_norm = 1,
                          .refuse = qwen3_5_refuse,
                          .save_null = none,
                          .hybrid = &qwen3_5_hybrid,
                          .vlm_type = "qwen3_5",
                          .vlm_class = "Qwen3_5ForConditionalGeneration",
                          .vlm_prefix = "model.language_model.",
                          .vlm_pass = qwen3_5_pass},
    [ENG_ARCH_MISTRAL] = {.model_type = "mistral",
                          .hf_class = "MistralForCausalLM",
                          .layer = "Llama's, with a sliding window when sliding_window is set; head_dim "
                                   "independent of hidden_size",
                          .kv_heads_absent = 8,
                          .max_pos_absent = 131072,
                          .refuse = no_refusal,
                          .save_null = none,
                          // MistralConfig's default: a file without the key has a window
                          // (Mistral 7B v0.2 and later write null: none).
                          .window_key = "sliding_window",
                          .window_absent = 4096},
};

const eng_arch_row *eng_arch_row_of(eng_arch a) {
  return (unsigned)a < ENG_ARCH_COUNT ? &rows[a] : NULL;
}

int eng_arch_find(const char *s, int by_class) {
  for (int a = 0; a < ENG_ARCH_COUNT; a++)
    if (strcmp(s, by_class ? rows[a].hf_class : rows[a].model_type) == 0) return a;
  return -1;
}

int eng_arch_find_vlm(const char *s, int by_class) {
  for (int a = 0; a < ENG_ARCH_COUNT; a++) {
    const char *v = by_class ? rows[a].vlm_class : rows[a].vlm_type;
    if (v && strcmp(s, v) == 0) return a;
  }
  return -1;
}

const char *eng_arch_name(eng_arch a) {
  return (unsigned)a < ENG_ARCH_COUNT ? rows[a].model_type : "unknown";
}

char *eng_arch_list(char *buf, size_t n, int by_class, const char *sep) {
  size_t at = 0;
  buf[0] = 0;
  for (int a = 0; a < ENG_ARCH_COUNT && at < n; a++) {
    int w = snprintf(buf + at, n - at, "%s%s", a ? sep : "", by_class ? rows[a].hf_class : rows[a].model_type);
    at += w > 0 ? (size_t)w : 0;
  }
  return buf;
}

void eng_arch_apply(struct eng_config *c, eng_arch a) {
  const eng_arch_row *r = eng_arch_row_of(a);
  c->arch = a;
  c->qkv_bias = r ? r->qkv_bias : 0;
  c->qk_norm = r ? r->qk_norm : 0;
  c->attn_gate = c->norm_plus_one = r && r->hybrid;
}

void eng_arch_print_table(FILE *f) {
  fprintf(f, "| model_type | class | a layer | refused when set |\n|---|---|---|---|\n");
  for (int a = 0; a < ENG_ARCH_COUNT; a++) {
    const eng_arch_row *r = &rows[a];
    fprintf(f, "| `%s` | `%s`", r->model_type, r->hf_class);
    if (r->vlm_class) {
      fprintf(f, "; `%s` (`%s`): its text model trains, tensors under", r->vlm_class, r->vlm_type);
      for (const char *const *p = r->vlm_pass; *p; p++) fprintf(f, "%s `%s`", p == r->vlm_pass ? "" : ",", *p);
      fprintf(f, " pass through to the export");
    }
    fprintf(f, " | %s | ", r->layer);
    for (const eng_arch_refusal *x = r->refuse; x->key; x++)
      fprintf(f, "%s`%s` (%s)", x == r->refuse ? "" : ", ", x->key, x->what);
    fprintf(f, " |\n");
  }
}
