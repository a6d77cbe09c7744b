// Loading weights that do not fit the config: a shape that disagrees with
// config.json, a non-float dtype, a missing tensor, an unknown extra tensor,
// a truncated file, and a broken shard index. Each must fail with a message
// that names the file and the tensor. Buffers that are not parameters (rotary
// tables) and an lm_head that a tied config stores as a copy of the embedding
// are ignored; a tied config's lm_head of its own is never dropped.
#define _XOPEN_SOURCE 700

#include <jansson.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "model/hf_io.h"
#include "model/safetensors.h"
#include "tmpdir.h"

static const eng_config cfg = {.arch = ENG_ARCH_LLAMA,
                               .vocab = 64,
                               .d_model = 32,
                               .n_layers = 2,
                               .n_heads = 4,
                               .n_kv_heads = 2,
                               .head_dim = 8,
                               .d_ff = 48,
                               .max_pos = 64,
                               .rope_theta = 10000.0f,
                               .rms_eps = 1e-6f,
                               .init_std = 0.02f,
                               .tie_embeddings = 0};
static eng_layout lo;
static float *w[4], *r[4];

// The model's tensors as writer sources, with names copied out of the visit.
typedef struct model_src {
  eng_st_src src[64];
  char names[64][96];
  int n;
} model_src;

static int add_tensor(void *ctx, int shard, const eng_tensor *t) {
  model_src *m = ctx;
  snprintf(m->names[m->n], sizeof m->names[0], "%s", t->name);
  m->src[m->n] = (eng_st_src){.name = m->names[m->n],
                              .dtype = ENG_ST_F32,
                              .ndim = t->cols ? 2 : 1,
                              .shape = {t->rows, t->cols},
                              .data = w[shard] + t->off};
  m->n++;
  return 0;
}

static void model_tensors(model_src *m) {
  m->n = 0;
  eng_layout_visit(&lo, add_tensor, m);
}

static eng_st_src *find_src(model_src *m, const char *name) {
  for (int i = 0; i < m->n; i++)
    if (strcmp(m->src[i].name, name) == 0) return &m->src[i];
  CHECK(0, "no tensor %s", name);
  return NULL;
}

static void drop_src(model_src *m, const char *name) {
  eng_st_src *s = find_src(m, name);
  memmove(s, s + 1, sizeof *s * (size_t)(m->src + m->n - (s + 1)));
  m->n--;
}

static void add_src(model_src *m, const char *name, int rows, int cols) {
  snprintf(m->names[m->n], sizeof m->names[0], "%s", name);
  m->src[m->n] = (eng_st_src){.name = m->names[m->n],
                              .dtype = ENG_ST_F32,
                              .ndim = cols ? 2 : 1,
                              .shape = {rows, cols},
                              .data = w[1]};
  m->n++;
}

// A fresh model directory holding m as model.safetensors.
static const char *write_model(const char *name, const model_src *m) {
  static char dir[512];
  snprintf(dir, sizeof dir, "%s", tmp_path(name));
  CHECK(mkdir(dir, 0755) == 0, "mkdir %s", dir);
  char path[600];
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  eng_err e = {0};
  CHECK_OK(eng_st_write(path, m->src, m->n, &e), &e);
  return dir;
}

// Loading dir must fail with code and a message holding each given word.
static void load_fails(const char *dir, int code, const char *w1, const char *w2, const char *w3) {
  eng_err e = {0};
  int rc = eng_hf_load_weights(NULL, dir, &lo, r, &e);
  CHECK(rc == code, "%s: expected %d, got %d (%s)", dir, code, rc, e.msg);
  const char *words[] = {w1, w2, w3};
  for (int i = 0; i < 3; i++)
    CHECK(!words[i] || strstr(e.msg, words[i]), "message lacks \"%s\": %s", words[i], e.msg);
}

static void test_baseline(void) {
  model_src m;
  model_tensors(&m);
  const char *dir = write_model("ok", &m);
  eng_err e = {0};
  CHECK_OK(eng_hf_load_weights(NULL, dir, &lo, r, &e), &e);
  for (int s = 0; s < lo.n_shards; s++)
    CHECK(memcmp(w[s], r[s], eng_layout_shard_numel(&lo, s) * sizeof(float)) == 0, "shard %d", s);
}

static void test_shape(void) {
  model_src m;
  model_tensors(&m);
  find_src(&m, "model.layers.1.mlp.up_proj.weight")->shape[0] = 24;
  const char *dir = write_model("shape", &m);
  load_fails(dir, ENG_EINVAL, "shape/model.safetensors", "\"model.layers.1.mlp.up_proj.weight\"",
             "[24, 32], but config.json implies [48, 32]");

  model_tensors(&m);
  eng_st_src *s = find_src(&m, "model.norm.weight");
  s->ndim = 2, s->shape[0] = 1, s->shape[1] = 32;
  dir = write_model("rank", &m);
  load_fails(dir, ENG_EINVAL, "\"model.norm.weight\"", "[1, 32]", "[32]");
}

static void test_dtype(void) {
  model_src m;
  model_tensors(&m);
  find_src(&m, "model.layers.0.self_attn.k_proj.weight")->dtype = ENG_ST_I32;
  const char *dir = write_model("dtype", &m);
  load_fails(dir, ENG_EINVAL, "dtype/model.safetensors",
             "\"model.layers.0.self_attn.k_proj.weight\"", "I32");
}

static void test_missing(void) {
  model_src m;
  model_tensors(&m);
  drop_src(&m, "model.norm.weight");
  const char *dir = write_model("missing", &m);
  load_fails(dir, ENG_EINVAL, "missing/model.safetensors", "\"model.norm.weight\"", "missing");
  model_tensors(&m);
  drop_src(&m, "lm_head.weight");
  dir = write_model("missing_head", &m);
  load_fails(dir, ENG_EINVAL, "\"lm_head.weight\"", "[64, 32]", "missing");
}

static void test_extra(void) {
  static const char *const extras[] = {"model.layers.0.self_attn.q_proj.bias", // no bias on Llama
                                       "model.layers.2.mlp.up_proj.weight",    // layer 2 of 2
                                       "model.layers.0.self_attn.q_norm.weight",
                                       "transformer.wte.weight",
                                       "model.layers.01.mlp.up_proj.weight"}; // not the HF spelling
  for (int i = 0; i < 5; i++) {
    model_src m;
    model_tensors(&m);
    add_src(&m, extras[i], 8, 0);
    char name[32], quoted[128];
    snprintf(name, sizeof name, "extra%d", i);
    snprintf(quoted, sizeof quoted, "\"%s\"", extras[i]);
    load_fails(write_model(name, &m), ENG_EINVAL, "/model.safetensors", quoted, "not a parameter");
  }
  // Rotary tables that some checkpoints carry are buffers, not parameters.
  model_src m;
  model_tensors(&m);
  add_src(&m, "model.rotary_emb.inv_freq", 4, 0);
  add_src(&m, "model.layers.1.self_attn.rotary_emb.inv_freq", 4, 0);
  eng_err e = {0};
  CHECK_OK(eng_hf_load_weights(NULL, write_model("inv_freq", &m), &lo, r, &e), &e);
}

// A tied config whose file holds an lm_head.weight too. A copy of the
// embedding loads tied (transformers ties it too); a head of its own unties
// the config (eng_hf_load_config, as transformers does) and is refused by a
// loader given the tied layout, which would drop it: in one file and in
// shards that put head and embedding in different files.
static void test_tied(void) {
  eng_config tied = cfg, got;
  tied.tie_embeddings = 1;
  eng_layout untied = lo;
  eng_layout_init(&lo, &tied);
  eng_err e = {0};
  char path[600];
  int was_untied;

  model_src m;
  model_tensors(&m);
  add_src(&m, "lm_head.weight", 64, 32);
  find_src(&m, "lm_head.weight")->data = w[0]; // the embedding's values
  const char *dir = write_model("tied_copy", &m);
  snprintf(path, sizeof path, "%s/config.json", dir);
  CHECK_OK(eng_config_save(&tied, path, "float32", NULL, NULL, &e), &e);
  CHECK_OK(eng_hf_load_weights(NULL, dir, &lo, r, &e), &e);
  CHECK_OK(eng_hf_load_config(NULL, dir, &got, &was_untied, &e), &e);
  CHECK(!was_untied && got.tie_embeddings, "a copy of the embedding untied the config");

  model_tensors(&m);
  add_src(&m, "lm_head.weight", 64, 32); // a layer's values
  dir = write_model("tied_own", &m);
  snprintf(path, sizeof path, "%s/config.json", dir);
  CHECK_OK(eng_config_save(&tied, path, "float32", NULL, NULL, &e), &e);
  load_fails(dir, ENG_EINVAL, "tied_own", "\"lm_head.weight\"", "differs from the embedding");
  CHECK_OK(eng_hf_load_config(NULL, dir, &got, &was_untied, &e), &e);
  CHECK(was_untied && !got.tie_embeddings, "a head of its own left the config tied");
  eng_layout own;
  eng_layout_init(&own, &got);
  CHECK_OK(eng_hf_load_weights(NULL, dir, &own, r, &e), &e);
  CHECK(!memcmp(r[3] + own.lm_head.off, w[1], own.lm_head.numel * sizeof(float)), "head not loaded");

  // Sharded: the untied model written in small files, then its config tied.
  dir = tmp_path("tied_sharded");
  CHECK_OK(eng_hf_save(dir, &cfg, &untied, (const float *const *)w, 0, 20000, NULL, NULL, &e), &e);
  snprintf(path, sizeof path, "%s/config.json", dir);
  CHECK_OK(eng_config_save(&tied, path, "float32", NULL, NULL, &e), &e);
  load_fails(dir, ENG_EINVAL, "\"lm_head.weight\"", "differs", NULL);
  CHECK_OK(eng_hf_load_config(NULL, dir, &got, &was_untied, &e), &e);
  CHECK(was_untied && !got.tie_embeddings, "sharded: a head of its own left the config tied");
  lo = untied;
}

static void test_truncated(void) {
  model_src m;
  model_tensors(&m);
  const char *dir = write_model("truncated", &m);
  char path[600];
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  struct stat st;
  CHECK(stat(path, &st) == 0 && truncate(path, st.st_size - 10) == 0, "cannot truncate %s", path);
  load_fails(dir, ENG_EINVAL, "truncated/model.safetensors", "\"lm_head.weight\"", "truncated");
}

static void write_text(const char *path, const char *text) {
  FILE *fp = fopen(path, "w");
  CHECK(fp, "cannot create %s", path);
  fputs(text, fp);
  fclose(fp);
}

// A sharded directory whose index is replaced by fmt, where %s stands for the
// file that holds the embedding (model-00001-of-0000N.safetensors).
static const char *sharded_with_index(const char *name, const char *fmt) {
  static char dir[512];
  snprintf(dir, sizeof dir, "%s", tmp_path(name));
  eng_err e = {0};
  CHECK_OK(eng_hf_save(dir, &cfg, &lo, (const float *const *)w, 0, 20000, NULL, NULL, &e), &e);
  char path[600], text[1024];
  snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
  json_error_t jerr;
  json_t *index = json_load_file(path, 0, &jerr);
  CHECK(index, "%s: %s", path, jerr.text);
  const char *first = json_string_value(
      json_object_get(json_object_get(index, "weight_map"), "model.embed_tokens.weight"));
  CHECK(first && strncmp(first, "model-00001-of-", 15) == 0, "embedding stored in %s", first);
  if (fmt) {
    snprintf(text, sizeof text, fmt, first);
    write_text(path, text);
  }
  json_decref(index);
  return dir;
}

static void test_index(void) {
  eng_err e = {0};
  CHECK_OK(eng_hf_load_weights(NULL, sharded_with_index("sh_ok", NULL), &lo, r, &e), &e);

  load_fails(sharded_with_index("sh_json", "{\"weight_map\": "), ENG_EINVAL,
             "sh_json/model.safetensors.index.json", NULL, NULL);
  load_fails(sharded_with_index("sh_map", "{\"weight_map\": [1]}"), ENG_EINVAL,
             "sh_map/model.safetensors.index.json", "\"weight_map\"", NULL);
  load_fails(sharded_with_index("sh_file", "{\"weight_map\": {\"model.norm.weight\": "
                                           "\"model-00099-of-00099.safetensors\"}}"),
             ENG_EIO, "sh_file/model-00099-of-00099.safetensors",
             "sh_file/model.safetensors.index.json", "cannot open");
  load_fails(sharded_with_index("sh_escape",
                                "{\"weight_map\": {\"model.norm.weight\": \"../x.safetensors\"}}"),
             ENG_EINVAL, "\"model.norm.weight\"", "../x.safetensors", NULL);
  load_fails(sharded_with_index("sh_type", "{\"weight_map\": {\"model.norm.weight\": 1}}"),
             ENG_EINVAL, "\"model.norm.weight\"", "\"weight_map\"", NULL);
  // The map places a tensor in a file that does not hold it.
  load_fails(sharded_with_index("sh_place", "{\"weight_map\": {\"model.norm.weight\": \"%s\"}}"),
             ENG_EINVAL, "\"model.norm.weight\"", "-of-", "model.safetensors.index.json");
  // An index that forgets a tensor: the missing one is named, with the index.
  load_fails(
      sharded_with_index("sh_short", "{\"weight_map\": {\"model.embed_tokens.weight\": \"%s\"}}"),
      ENG_EINVAL, "sh_short/model.safetensors.index.json",
      "\"model.layers.0.input_layernorm.weight\"", "missing");

  const char *empty = tmp_path("empty");
  CHECK(mkdir(empty, 0755) == 0, "mkdir");
  load_fails(empty, ENG_EIO, "empty", "model.safetensors", NULL);
}

int main(void) {
  tmp_make();
  eng_layout_init(&lo, &cfg);
  CHECK(lo.n_shards == 4, "layout has %d shards", lo.n_shards);
  for (int s = 0; s < lo.n_shards; s++) {
    size_t n = eng_layout_shard_numel(&lo, s);
    w[s] = malloc(n * sizeof(float));
    r[s] = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
      w[s][i] = (float)((s * 7919 + i * 104729) % 2003) / 2003.0f - 0.5f;
  }
  test_baseline();
  test_shape();
  test_dtype();
  test_missing();
  test_extra();
  test_tied();
  test_truncated();
  test_index();
  for (int s = 0; s < lo.n_shards; s++) free(w[s]), free(r[s]);
  tmp_cleanup();
  printf("test_hf_load_errors: ok\n");
  return 0;
}
