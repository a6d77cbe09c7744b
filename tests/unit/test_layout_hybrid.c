// The layout of a hybrid model (Qwen3.5: Gated DeltaNet layers with every
// full_every-th layer gated full attention): each layer's kind, shard size
// and tensors, names found back, and the whole list of names and shapes equal
// to transformers' Qwen3_5ForCausalLM's (tests/ref/check_layout.py, on the
// meta device) for a tiny odd config and for Qwen3.6-27B's shape.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "model/layout.h"
#include "python.h"

typedef struct listing {
  FILE *f;
  const eng_layout *lo;
  size_t numel;
  int n;
} listing;

static int list_tensor(void *ctx, int shard, const eng_tensor *t) {
  listing *L = ctx;
  int64_t shape[3];
  int nd = eng_tensor_hf_shape(t, shape);
  fprintf(L->f, "%s %lld", t->name, (long long)shape[0]);
  for (int i = 1; i < nd; i++) fprintf(L->f, ",%lld", (long long)shape[i]);
  fprintf(L->f, "\n");
  // Found back by its name, in the same shard, at the same place.
  int s2;
  eng_tensor t2;
  CHECK(eng_layout_find(L->lo, t->name, &s2, &t2) == 0 && s2 == shard && t2.off == t->off && t2.numel == t->numel,
        "%s not found back", t->name);
  CHECK(t->off + t->numel <= eng_layout_shard_numel(L->lo, shard), "%s past its shard", t->name);
  L->numel += t->numel;
  L->n++;
  return 0;
}

// Writes c's config.json keys (the text model's, as Qwen3_5TextConfig takes
// them) and the layout's tensors, and has transformers compare.
static void against_transformers(const char *dir, const char *what, const eng_config *c) {
  char cfg[600], list[600];
  snprintf(cfg, sizeof cfg, "%s/%s.json", dir, what);
  snprintf(list, sizeof list, "%s/%s.txt", dir, what);
  FILE *f = fopen(cfg, "w");
  CHECK(f, "cannot write %s", cfg);
  fprintf(f,
          "{\"vocab_size\": %d, \"hidden_size\": %d, \"intermediate_size\": %d, \"num_hidden_layers\": %d,"
          " \"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"head_dim\": %d,"
          " \"linear_num_key_heads\": %d, \"linear_num_value_heads\": %d, \"linear_key_head_dim\": %d,"
          " \"linear_value_head_dim\": %d, \"linear_conv_kernel_dim\": %d, \"full_attention_interval\": %d,"
          " \"tie_word_embeddings\": %s}\n",
          c->vocab, c->d_model, c->d_ff, c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim, c->dn.k_heads,
          c->dn.v_heads, c->dn.k_dim, c->dn.v_dim, c->dn.conv, c->full_every, c->tie_embeddings ? "true" : "false");
  CHECK(fclose(f) == 0, "cannot write %s", cfg);
  eng_layout lo;
  eng_layout_init(&lo, c);
  listing L = {fopen(list, "w"), &lo, 0, 0};
  CHECK(L.f, "cannot write %s", list);
  CHECK(eng_layout_visit(&lo, list_tensor, &L) == 0, "visit");
  CHECK(fclose(L.f) == 0, "cannot write %s", list);
  CHECK(L.numel == lo.total_numel, "%s: the tensors hold %zu floats, the layout counts %zu", what, L.numel,
        lo.total_numel);
  printf("%s: %d tensors, %zu parameters\n", what, L.n, lo.total_numel);
  fflush(stdout);
  int rc = py_run("%s/tests/ref/check_layout.py Qwen3_5ForCausalLM %s %s", TRAIND_SOURCE_DIR, cfg, list);
  CHECK(rc == 0, "%s: the layout is not transformers' (exit %d, printed above)", what, rc);
}

int main(void) {
  // Odd shapes: 7 layers, full attention at layers 2 and 5 (every third),
  // q_proj twice as wide for the gate, 3 value heads per key head.
  eng_config tiny = {.vocab = 97, .d_model = 40, .n_layers = 7, .n_heads = 4, .n_kv_heads = 2, .head_dim = 12,
                     .d_ff = 56, .max_pos = 512, .rope_theta = 1e7f, .rms_eps = 1e-6f, .init_std = 0.02f,
                     .rope_dim = 4, .full_every = 3, .dn = {2, 6, 6, 10, 4}};
  eng_arch_apply(&tiny, ENG_ARCH_QWEN3_5);
  eng_err e = {0};
  CHECK_OK(eng_config_validate(&tiny, "tiny", &e), &e);
  eng_layout lo;
  eng_layout_init(&lo, &tiny);
  for (int l = 0; l < tiny.n_layers; l++) {
    const int attn = l == 2 || l == 5;
    CHECK(eng_layout_kind(&lo, l) == (attn ? ENG_KIND_ATTN : ENG_KIND_DN), "layer %d's kind", l);
    CHECK(eng_layout_shard_numel(&lo, l + 1) == (attn ? lo.layer_numel : lo.dn_numel), "layer %d's shard", l);
    eng_tensor t = eng_layout_layer_tensor(&lo, l, attn ? ENG_P_WQ : ENG_P_DN_QKV);
    CHECK(t.numel && strstr(t.name, attn ? "self_attn.q_proj" : "linear_attn.in_proj_qkv"), "layer %d: %s", l,
          t.name);
    CHECK(eng_layout_layer_tensor(&lo, l, attn ? ENG_P_DN_QKV : ENG_P_WQ).numel == 0, "layer %d: other kind's", l);
  }
  // A DN layer's name in an attention layer (and the reverse) is no parameter.
  int s;
  eng_tensor t;
  CHECK(eng_layout_find(&lo, "model.layers.2.linear_attn.A_log", &s, &t) < 0, "A_log in an attention layer");
  CHECK(eng_layout_find(&lo, "model.layers.0.self_attn.q_proj.weight", &s, &t) < 0, "q_proj in a DN layer");
  // An export of the model writes its conv weights as transformers stores them.
  int64_t shape[3];
  t = eng_layout_layer_tensor(&lo, 0, ENG_P_DN_CONV);
  CHECK(eng_tensor_hf_shape(&t, shape) == 3 && shape[0] == 2 * 12 + 60 && shape[1] == 1 && shape[2] == 4,
        "conv1d.weight's shape");
  // The engine refuses to train it until the executor streams both kinds.
  eng_config bad = tiny;
  bad.dn.v_heads = 5;
  CHECK(eng_config_validate(&bad, "bad", &e) == ENG_ENOTSUP && strstr(e.msg, "multiple of the key heads"), "%s",
        e.msg);

  char dir[] = "/tmp/test_layout_hybrid.XXXXXX";
  CHECK(mkdtemp(dir), "mkdtemp");
  against_transformers(dir, "tiny", &tiny);
  tiny.tie_embeddings = 1;
  against_transformers(dir, "tiny_tied", &tiny);
  // Qwen3.6-27B's text model: 64 layers, full attention every 4th; hidden
  // 5120, MLP 17408; 24 heads of 256 over 4 kv heads; linear attention 16
  // key heads and 48 value heads of 128, conv 4; vocabulary 248320, untied.
  eng_config q27 = {.vocab = 248320, .d_model = 5120, .n_layers = 64, .n_heads = 24, .n_kv_heads = 4,
                    .head_dim = 256, .d_ff = 17408, .max_pos = 262144, .rope_theta = 1e7f, .rms_eps = 1e-6f,
                    .init_std = 0.02f, .rope_dim = 64, .full_every = 4, .dn = {16, 48, 128, 128, 4}};
  eng_arch_apply(&q27, ENG_ARCH_QWEN3_5);
  CHECK_OK(eng_config_validate(&q27, "27b", &e), &e);
  against_transformers(dir, "qwen3.6-27b", &q27);

  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK(system(cmd) == 0, "cleanup");
  printf("test_layout_hybrid: ok\n");
  return 0;
}
