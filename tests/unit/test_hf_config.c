// config.json: save/load round trips for Llama, Qwen2 and Qwen3; the defaults
// transformers applies; both ways of writing the RoPE base; every refusal,
// each naming the file and the field; token ids carried from a source
// config; a multimodal checkpoint's text model; and every fixture's
// config.json loads.
#define _XOPEN_SOURCE 700

#include <dirent.h>
#include <jansson.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "model/config.h"
#include "tmpdir.h"

static const char *cfg_path;

// A minimal valid config.json of each architecture (transformers 5 style).
static json_t *base(eng_arch a) {
  static const char *const types[] = {"llama", "qwen2", "qwen3"};
  static const char *const classes[] = {"LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"};
  json_t *o = json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:{s:f, s:s}}", "architectures",
                        classes[a], "model_type", types[a], "vocab_size", 128, "hidden_size", 32,
                        "num_hidden_layers", 2, "num_attention_heads", 4, "num_key_value_heads", 2,
                        "intermediate_size", 48, "rope_parameters", "rope_theta", 500000.0,
                        "rope_type", "default");
  CHECK(o, "json_pack failed");
  return o;
}

static void put(json_t *o, const char *key, json_t *v) {
  CHECK(json_object_set_new(o, key, v) == 0, "cannot set %s", key);
}

// Writes o (consumed) as the config file and loads it.
static int load_obj(json_t *o, eng_config *c, eng_err *e) {
  CHECK(json_dump_file(o, cfg_path, JSON_INDENT(2)) == 0, "cannot write %s", cfg_path);
  json_decref(o);
  return eng_config_load(NULL, cfg_path, c, e);
}

static eng_config load_ok(json_t *o) {
  eng_config c;
  eng_err e = {0};
  CHECK_OK(load_obj(o, &c, &e), &e);
  return c;
}

// Loading o must fail with code, naming the file and "field" (quoted).
static void refused(json_t *o, int code, const char *field) {
  eng_config c;
  eng_err e = {0};
  int rc = load_obj(o, &c, &e);
  char quoted[128];
  snprintf(quoted, sizeof quoted, "\"%s\"", field);
  CHECK(rc == code, "field %s: expected %d, got %d (%s)", field, code, rc, e.msg);
  CHECK(strstr(e.msg, cfg_path) && strstr(e.msg, quoted), "message must name %s and %s: %s",
        cfg_path, quoted, e.msg);
}

static void refused_text(const char *text, int code, const char *what) {
  FILE *fp = fopen(cfg_path, "w");
  fputs(text, fp);
  fclose(fp);
  eng_config c;
  eng_err e = {0};
  int rc = eng_config_load(NULL, cfg_path, &c, &e);
  CHECK(rc == code && strstr(e.msg, cfg_path) && strstr(e.msg, what), "%s: got %d: %s", text, rc,
        e.msg);
}

// ---- round trips -------------------------------------------------------------------

static void test_roundtrip(void) {
  const eng_config cs[] = {
      {.arch = ENG_ARCH_LLAMA,
       .vocab = 512,
       .d_model = 64,
       .n_layers = 2,
       .n_heads = 4,
       .n_kv_heads = 2,
       .head_dim = 16,
       .d_ff = 176,
       .max_pos = 128,
       .rope_theta = 10000.0f,
       .rms_eps = 1e-6f,
       .init_std = 0.02f,
       .tie_embeddings = 1},
      {.arch = ENG_ARCH_QWEN2,
       .vocab = 1000,
       .d_model = 96,
       .n_layers = 3,
       .n_heads = 6,
       .n_kv_heads = 3,
       .head_dim = 16,
       .d_ff = 200,
       .max_pos = 4096,
       .rope_theta = 1e6f,
       .rms_eps = 1e-5f,
       .init_std = 0.0125f,
       .tie_embeddings = 0,
       .qkv_bias = 1},
      {.arch = ENG_ARCH_QWEN3,
       .vocab = 512,
       .d_model = 64,
       .n_layers = 2,
       .n_heads = 4,
       .n_kv_heads = 1,
       .head_dim = 32,
       .d_ff = 176,
       .max_pos = 40960,
       .rope_theta = 1234567.0f,
       .rms_eps = 3e-7f,
       .init_std = 0.1f,
       .tie_embeddings = 1,
       .qk_norm = 1},
  };
  for (int i = 0; i < 3; i++) {
    eng_err e = {0};
    CHECK_OK(eng_config_save(&cs[i], cfg_path, i == 2 ? "bfloat16" : "float32", NULL, NULL, &e), &e);
    eng_config back;
    CHECK_OK(eng_config_load(NULL, cfg_path, &back, &e), &e);
    CHECK(memcmp(&back, &cs[i], sizeof back) == 0, "%s config does not round-trip",
          eng_arch_name(cs[i].arch));
    // Both rope spellings and both dtype spellings are there, with values
    // that read back as written (shortest decimal, no float noise).
    json_error_t jerr;
    json_t *o = json_load_file(cfg_path, 0, &jerr);
    CHECK(o, "%s", jerr.text);
    CHECK(json_real_value(json_object_get(o, "rope_theta")) == (double)cs[i].rope_theta &&
              json_real_value(json_object_get(json_object_get(o, "rope_parameters"),
                                              "rope_theta")) == (double)cs[i].rope_theta,
          "rope_theta not written both ways");
    CHECK(strcmp(json_string_value(json_object_get(o, "torch_dtype")),
                 json_string_value(json_object_get(o, "dtype"))) == 0,
          "torch_dtype and dtype differ");
    if (i == 1) CHECK(json_real_value(json_object_get(o, "rms_norm_eps")) == 1e-5, "eps noise");
    json_decref(o);
  }
  CHECK(strcmp(eng_arch_name(ENG_ARCH_QWEN3), "qwen3") == 0, "eng_arch_name");
}

// ---- defaults and spellings --------------------------------------------------------

static void test_defaults(void) {
  json_t *o = base(ENG_ARCH_LLAMA);
  json_object_del(o, "num_key_value_heads");
  json_object_del(o, "rope_parameters");
  eng_config c = load_ok(o);
  CHECK(c.arch == ENG_ARCH_LLAMA && c.n_kv_heads == 4 && c.head_dim == 8 && c.max_pos == 2048 &&
            c.rope_theta == 10000.0f && c.rms_eps == 1e-6f && c.init_std == 0.02f &&
            c.tie_embeddings == 0 && c.qkv_bias == 0 && c.qk_norm == 0,
        "llama defaults");

  // transformers: Qwen takes 32 kv heads when the field is absent, the head
  // count when it is null; Qwen3 takes head_dim 128 when absent.
  o = base(ENG_ARCH_QWEN2);
  put(o, "num_attention_heads", json_integer(64));
  put(o, "hidden_size", json_integer(128));
  json_object_del(o, "num_key_value_heads");
  c = load_ok(o);
  CHECK(c.n_kv_heads == 32 && c.head_dim == 2 && c.max_pos == 32768 && c.qkv_bias == 1,
        "qwen2 defaults: kv %d hd %d", c.n_kv_heads, c.head_dim);
  o = base(ENG_ARCH_QWEN2);
  put(o, "num_key_value_heads", json_null());
  CHECK(load_ok(o).n_kv_heads == 4, "qwen2 null kv heads");
  o = base(ENG_ARCH_QWEN3);
  c = load_ok(o);
  CHECK(c.head_dim == 128 && c.qk_norm == 1 && c.qkv_bias == 0, "qwen3 head_dim default %d",
        c.head_dim);
  o = base(ENG_ARCH_QWEN3);
  put(o, "head_dim", json_integer(24));
  CHECK(load_ok(o).head_dim == 24, "qwen3 head_dim");

  // The RoPE base: legacy top level, transformers 5 rope_parameters (wins).
  o = base(ENG_ARCH_QWEN2);
  json_object_del(o, "rope_parameters");
  put(o, "rope_theta", json_real(1e6));
  CHECK(load_ok(o).rope_theta == 1e6f, "legacy rope_theta");
  o = base(ENG_ARCH_QWEN2);
  put(o, "rope_theta", json_integer(7));
  CHECK(load_ok(o).rope_theta == 500000.0f, "rope_parameters must win");
  o = base(ENG_ARCH_LLAMA);
  put(o, "rope_parameters", json_pack("{s:i}", "rope_theta", 20000));
  CHECK(load_ok(o).rope_theta == 20000.0f, "integer theta, no rope_type");
  o = base(ENG_ARCH_LLAMA);
  put(o, "rope_scaling", json_null());
  put(o, "rope_parameters", json_null());
  CHECK(load_ok(o).rope_theta == 10000.0f, "null rope fields");

  // Inert or switched-off features pass.
  o = base(ENG_ARCH_QWEN3);
  put(o, "sliding_window", json_integer(4096));
  put(o, "use_sliding_window", json_false());
  put(o, "layer_types", json_pack("[s,s]", "full_attention", "full_attention"));
  put(o, "num_experts", json_integer(0));
  put(o, "attention_bias", json_false());
  put(o, "hidden_act", json_string("silu"));
  put(o, "tie_word_embeddings", json_true());
  put(o, "rms_norm_eps", json_real(1e-5));
  put(o, "initializer_range", json_real(0.01));
  c = load_ok(o);
  CHECK(c.tie_embeddings == 1 && c.rms_eps == 1e-5f && c.init_std == 0.01f, "explicit fields");
  o = base(ENG_ARCH_LLAMA);
  json_object_del(o, "architectures");
  put(o, "mlp_bias", json_false());
  CHECK(load_ok(o).arch == ENG_ARCH_LLAMA, "model_type alone");
  o = base(ENG_ARCH_QWEN2);
  json_object_del(o, "model_type");
  CHECK(load_ok(o).arch == ENG_ARCH_QWEN2, "architectures alone");
}

// ---- refusals --------------------------------------------------------------------------

static void test_refusals(void) {
  static const char *const required[] = {"vocab_size", "hidden_size", "num_hidden_layers",
                                         "num_attention_heads", "intermediate_size"};
  for (int i = 0; i < 5; i++) {
    json_t *o = base(ENG_ARCH_QWEN2);
    json_object_del(o, required[i]);
    refused(o, ENG_EINVAL, required[i]);
    o = base(ENG_ARCH_LLAMA);
    put(o, required[i], json_string("64"));
    refused(o, ENG_EINVAL, required[i]);
  }
  json_t *o = base(ENG_ARCH_LLAMA);
  put(o, "model_type", json_string("gemma3"));
  json_object_del(o, "architectures");
  refused(o, ENG_ENOTSUP, "model_type");
  o = base(ENG_ARCH_LLAMA);
  put(o, "architectures", json_pack("[s]", "Gemma3ForCausalLM"));
  refused(o, ENG_ENOTSUP, "architectures");
  o = base(ENG_ARCH_LLAMA);
  put(o, "architectures", json_pack("[s]", "LlamaModel"));
  refused(o, ENG_ENOTSUP, "architectures");
  o = base(ENG_ARCH_LLAMA);
  put(o, "architectures", json_pack("[s]", "Qwen2ForCausalLM"));
  refused(o, ENG_EINVAL, "architectures");
  o = base(ENG_ARCH_LLAMA);
  json_object_del(o, "architectures");
  json_object_del(o, "model_type");
  refused(o, ENG_EINVAL, "model_type");

  // RoPE scaling: a type model/rope.h lacks, a type without its keys, a key
  // no type reads.
  o = base(ENG_ARCH_LLAMA);
  put(o, "rope_parameters", json_pack("{s:f, s:s, s:f}", "rope_theta", 1e4, "rope_type", "dynamic", "factor", 4.0));
  refused(o, ENG_ENOTSUP, "rope_parameters.rope_type");
  o = base(ENG_ARCH_LLAMA);
  put(o, "rope_parameters",
      json_pack("{s:f, s:s, s:f}", "rope_theta", 1e4, "rope_type", "llama3", "factor", 8.0));
  refused(o, ENG_EINVAL, "rope_parameters.low_freq_factor");
  o = base(ENG_ARCH_LLAMA);
  json_object_del(o, "rope_parameters");
  put(o, "rope_scaling", json_pack("{s:s}", "type", "linear"));
  refused(o, ENG_EINVAL, "rope_parameters.factor");
  o = base(ENG_ARCH_LLAMA);
  put(o, "rope_parameters", json_pack("{s:f, s:f}", "rope_theta", 1e4, "short_factor", 1.0));
  refused(o, ENG_ENOTSUP, "rope_parameters.short_factor");
  o = base(ENG_ARCH_LLAMA);
  put(o, "rope_parameters", json_pack("{s:s}", "rope_theta", "big"));
  refused(o, ENG_EINVAL, "rope_parameters.rope_theta");

  o = base(ENG_ARCH_QWEN2);
  put(o, "use_sliding_window", json_true());
  refused(o, ENG_ENOTSUP, "use_sliding_window");
  o = base(ENG_ARCH_QWEN3);
  put(o, "use_sliding_window", json_true());
  refused(o, ENG_ENOTSUP, "use_sliding_window");
  o = base(ENG_ARCH_QWEN2);
  put(o, "layer_types", json_pack("[s,s]", "full_attention", "sliding_attention"));
  refused(o, ENG_ENOTSUP, "layer_types");

  o = base(ENG_ARCH_QWEN2);
  put(o, "num_experts", json_integer(8));
  refused(o, ENG_ENOTSUP, "num_experts");
  o = base(ENG_ARCH_LLAMA);
  put(o, "num_local_experts", json_integer(4));
  refused(o, ENG_ENOTSUP, "num_local_experts");
  o = base(ENG_ARCH_QWEN3);
  put(o, "num_experts_per_tok", json_integer(2));
  refused(o, ENG_ENOTSUP, "num_experts_per_tok");

  o = base(ENG_ARCH_LLAMA);
  put(o, "attention_bias", json_true());
  refused(o, ENG_ENOTSUP, "attention_bias");
  o = base(ENG_ARCH_LLAMA);
  put(o, "mlp_bias", json_true());
  refused(o, ENG_ENOTSUP, "mlp_bias");
  o = base(ENG_ARCH_QWEN3);
  put(o, "attention_bias", json_true());
  refused(o, ENG_ENOTSUP, "attention_bias");
  o = base(ENG_ARCH_LLAMA);
  put(o, "hidden_act", json_string("gelu"));
  refused(o, ENG_ENOTSUP, "hidden_act");

  // Wrong JSON types.
  o = base(ENG_ARCH_LLAMA);
  put(o, "tie_word_embeddings", json_string("yes"));
  refused(o, ENG_EINVAL, "tie_word_embeddings");
  o = base(ENG_ARCH_LLAMA);
  put(o, "rms_norm_eps", json_string("small"));
  refused(o, ENG_EINVAL, "rms_norm_eps");
  o = base(ENG_ARCH_LLAMA);
  put(o, "num_key_value_heads", json_real(2.0));
  refused(o, ENG_EINVAL, "num_key_value_heads");
  o = base(ENG_ARCH_LLAMA);
  put(o, "model_type", json_integer(1));
  refused(o, ENG_EINVAL, "model_type");
  o = base(ENG_ARCH_LLAMA);
  put(o, "rope_parameters", json_string("default"));
  refused(o, ENG_EINVAL, "rope_parameters");
  o = base(ENG_ARCH_LLAMA);
  put(o, "vocab_size", json_integer(1LL << 40));
  refused(o, ENG_EINVAL, "vocab_size");

  // Sizes.
  o = base(ENG_ARCH_LLAMA);
  put(o, "num_hidden_layers", json_integer(0));
  refused(o, ENG_EINVAL, "num_hidden_layers");
  o = base(ENG_ARCH_QWEN2);
  put(o, "vocab_size", json_integer(-1));
  refused(o, ENG_EINVAL, "vocab_size");
  o = base(ENG_ARCH_QWEN2);
  put(o, "num_key_value_heads", json_integer(3));
  refused(o, ENG_EINVAL, "num_key_value_heads");
  o = base(ENG_ARCH_LLAMA);
  put(o, "hidden_size", json_integer(30));
  refused(o, ENG_EINVAL, "hidden_size");
  o = base(ENG_ARCH_QWEN2);
  put(o, "rms_norm_eps", json_real(0.0));
  refused(o, ENG_EINVAL, "rms_norm_eps");

  refused_text("{\"model_type\": \"llama\",", ENG_EINVAL, "not valid JSON");
  refused_text("[1, 2, 3]", ENG_EINVAL, "JSON object");
  eng_config c;
  eng_err e = {0};
  const char *absent = tmp_path("absent.json");
  CHECK(eng_config_load(NULL, absent, &c, &e) == ENG_EIO && strstr(e.msg, absent), "absent: %s", e.msg);
}

static void test_validate_and_save_refusal(void) {
  eng_config c = {.arch = ENG_ARCH_LLAMA,
                  .vocab = 8,
                  .d_model = 8,
                  .n_layers = 1,
                  .n_heads = 2,
                  .n_kv_heads = 2,
                  .head_dim = 4,
                  .d_ff = 8,
                  .max_pos = 8,
                  .rope_theta = 1e4f,
                  .rms_eps = 1e-6f,
                  .init_std = 0.02f};
  eng_err e = {0};
  CHECK_OK(eng_config_validate(&c, "spec", &e), &e);
  c.qkv_bias = 1; // Llama has no q/k/v bias: transformers would not know it
  CHECK(eng_config_validate(&c, "spec", &e) == ENG_EINVAL && strstr(e.msg, "spec"), "%s", e.msg);
  c.qkv_bias = 0;
  c.d_ff = 0;
  CHECK(eng_config_validate(&c, "spec", &e) == ENG_EINVAL && strstr(e.msg, "\"intermediate_size\""),
        "%s", e.msg);
  const char *path = tmp_path("refused.json");
  CHECK(eng_config_save(&c, path, "float32", NULL, NULL, &e) == ENG_EINVAL && strstr(e.msg, path), "%s", e.msg);
  struct stat st;
  CHECK(stat(path, &st) != 0, "a refused config was written");
}

// Token ids: an integer or null (eos_token_id also a list of integers)
// loads, anything else is refused by name; a save from a source config
// writes the source's ids as they are there, and no others.
static void test_token_ids(void) {
  json_t *o = base(ENG_ARCH_QWEN3);
  put(o, "bos_token_id", json_integer(1));
  put(o, "eos_token_id", json_pack("[i,i]", 2, 151645));
  put(o, "pad_token_id", json_integer(-1));
  const char *src = tmp_path("ids_src.json"), *out = tmp_path("ids_out.json");
  CHECK(json_dump_file(o, src, 0) == 0, "cannot write %s", src);
  eng_config c = load_ok(json_deep_copy(o));
  eng_err e = {0};
  CHECK_OK(eng_config_save(&c, out, "float32", NULL, src, &e), &e);
  json_error_t jerr;
  json_t *saved = json_load_file(out, 0, &jerr);
  CHECK(saved, "%s: %s", out, jerr.text);
  const char *keys[] = {"bos_token_id", "eos_token_id", "pad_token_id"};
  for (int i = 0; i < 3; i++)
    CHECK(json_equal(json_object_get(saved, keys[i]), json_object_get(o, keys[i])),
          "%s not kept", keys[i]);
  json_decref(saved);

  // Absent in the source: absent in the copy (transformers reads None).
  json_object_del(o, "bos_token_id");
  CHECK(json_dump_file(o, src, 0) == 0, "cannot write %s", src);
  CHECK_OK(eng_config_save(&c, out, "float32", NULL, src, &e), &e);
  saved = json_load_file(out, 0, &jerr);
  CHECK(saved && !json_object_get(saved, "bos_token_id"), "bos_token_id invented");
  json_decref(saved);
  json_decref(o);

  o = base(ENG_ARCH_LLAMA);
  put(o, "eos_token_id", json_pack("[i,s]", 2, "3"));
  refused(o, ENG_EINVAL, "eos_token_id");
  o = base(ENG_ARCH_LLAMA);
  put(o, "bos_token_id", json_pack("[i]", 1)); // only eos may be a list
  refused(o, ENG_EINVAL, "bos_token_id");
  o = base(ENG_ARCH_QWEN2);
  put(o, "pad_token_id", json_string("0"));
  refused(o, ENG_EINVAL, "pad_token_id");

  // A source that went bad after the load: the save names it.
  o = json_pack("{s:s}", "eos_token_id", "x");
  CHECK(o && json_dump_file(o, src, 0) == 0, "cannot write %s", src);
  json_decref(o);
  CHECK(eng_config_save(&c, out, "float32", NULL, src, &e) == ENG_EINVAL && strstr(e.msg, src) &&
            strstr(e.msg, "\"eos_token_id\""),
        "%s", e.msg);
}

// tests/fixtures/<name>/config.json as JSON, for the caller to release; its
// path into src[n].
static json_t *fixture_config(const char *name, char *src, size_t n) {
  snprintf(src, n, "%s/tests/fixtures/%s/config.json", TRAIND_SOURCE_DIR, name);
  json_error_t je;
  json_t *o = json_load_file(src, 0, &je);
  CHECK(o, "%s: %s", src, je.text);
  return o;
}

// A Qwen3_5ForConditionalGeneration config.json (tests/fixtures/qwen3_5_vlm's):
// its text_config is the text model, tied as the top level says; what does
// not fit together is refused naming the field.
static void test_vlm(void) {
  char src[1024];
  json_t *vlm = fixture_config("qwen3_5_vlm", src, sizeof src);
  eng_config c = load_ok(json_deep_copy(vlm));
  CHECK(c.vlm && c.arch == ENG_ARCH_QWEN3_5 && c.n_layers == 5 && c.full_every == 3 && c.d_model == 56 &&
            !c.tie_embeddings && c.rope_dim == 4,
        "the text model of %s: vlm %d arch %d layers %d every %d", src, c.vlm, c.arch, c.n_layers, c.full_every);
  // Without model_type in text_config it is still the family's text model.
  json_t *o = json_deep_copy(vlm);
  json_object_del(json_object_get(o, "text_config"), "model_type");
  c = load_ok(o);
  CHECK(c.vlm && c.arch == ENG_ARCH_QWEN3_5, "text_config without model_type");
  // transformers ties by the top level.
  o = json_deep_copy(vlm);
  put(o, "tie_word_embeddings", json_true());
  CHECK(load_ok(o).tie_embeddings, "the top level's tie_word_embeddings is not the one read");
  o = json_deep_copy(vlm);
  json_object_del(o, "text_config");
  refused(o, ENG_EINVAL, "text_config");
  o = json_deep_copy(vlm);
  put(json_object_get(o, "text_config"), "model_type", json_string("qwen3"));
  refused(o, ENG_EINVAL, "model_type");
  o = json_deep_copy(vlm);
  put(o, "architectures", json_pack("[s]", "Qwen3ForCausalLM"));
  refused(o, ENG_EINVAL, "architectures");
  o = json_deep_copy(vlm);
  put(json_object_get(o, "text_config"), "num_experts", json_integer(8));
  refused(o, ENG_ENOTSUP, "num_experts");
  // An export writes the source's config.json with the text model in text_config.
  c = load_ok(json_deep_copy(vlm));
  eng_err e = {0};
  const char *out = tmp_path("vlm-export.json");
  CHECK(eng_config_save(&c, out, "bfloat16", NULL, NULL, &e) == ENG_EINVAL && strstr(e.msg, "source"),
        "a multimodal export without its source: %s", e.msg);
  CHECK_OK(eng_config_save(&c, out, "bfloat16", NULL, src, &e), &e);
  eng_config back;
  CHECK_OK(eng_config_load(NULL, out, &back, &e), &e);
  CHECK(!memcmp(&back, &c, sizeof c), "the exported config.json loads as another config");
  json_error_t je;
  json_t *saved = json_load_file(out, 0, &je);
  CHECK(saved && json_equal(json_object_get(saved, "vision_config"), json_object_get(vlm, "vision_config")) &&
            !strcmp(json_string_value(json_object_get(saved, "dtype")), "bfloat16"),
        "the export's vision_config or dtype");
  json_decref(saved);
  json_decref(vlm);
}

// RoPE scaling as Llama 3.1 writes it (rope_parameters), and the older
// rope_scaling spelling ("type"), read and written back both ways.
static void test_rope_scaling(void) {
  json_t *o = base(ENG_ARCH_LLAMA);
  put(o, "rope_parameters",
      json_pack("{s:f, s:s, s:f, s:f, s:f, s:i}", "rope_theta", 500000.0, "rope_type", "llama3", "factor", 8.0,
                "low_freq_factor", 1.0, "high_freq_factor", 4.0, "original_max_position_embeddings", 8192));
  eng_config c = load_ok(o);
  CHECK(c.rope.type == ENG_ROPE_LLAMA3 && c.rope.factor == 8.0f && c.rope.low_freq_factor == 1.0f &&
            c.rope.high_freq_factor == 4.0f && c.rope.original_max_pos == 8192 && c.rope_theta == 500000.0f,
        "Llama 3.1's rope_parameters");
  eng_err e = {0};
  CHECK_OK(eng_config_save(&c, cfg_path, "float32", NULL, NULL, &e), &e);
  eng_config back;
  CHECK_OK(eng_config_load(NULL, cfg_path, &back, &e), &e);
  CHECK(!memcmp(&back, &c, sizeof c), "llama3 RoPE does not survive save and load");
  json_error_t je;
  json_t *saved = json_load_file(cfg_path, 0, &je);
  const json_t *sc = json_object_get(saved, "rope_scaling");
  CHECK(sc && !strcmp(json_string_value(json_object_get(sc, "rope_type")), "llama3") &&
            json_integer_value(json_object_get(sc, "original_max_position_embeddings")) == 8192,
        "rope_scaling is not written for transformers 4.x");
  json_decref(saved);
  o = base(ENG_ARCH_LLAMA);
  json_object_del(o, "rope_parameters");
  put(o, "rope_scaling", json_pack("{s:s, s:f}", "type", "linear", "factor", 2.0));
  c = load_ok(o);
  CHECK(c.rope.type == ENG_ROPE_LINEAR && c.rope.factor == 2.0f && c.rope_theta == 10000.0f, "legacy rope_scaling");
  // YaRN as Qwen2.5 writes it, with its optional keys, survives save and load.
  o = base(ENG_ARCH_QWEN2);
  put(o, "rope_scaling", json_pack("{s:s, s:f, s:i, s:f, s:f, s:b}", "type", "yarn", "factor", 4.0,
                                   "original_max_position_embeddings", 32768, "mscale", 1.0, "beta_fast", 16.0,
                                   "truncate", 0));
  json_object_del(o, "rope_parameters");
  c = load_ok(o);
  CHECK(c.rope.type == ENG_ROPE_YARN && c.rope.factor == 4.0f && c.rope.original_max_pos == 32768 &&
            c.rope.mscale == 1.0f && c.rope.beta_fast == 16.0f && c.rope.no_truncate && !c.rope.beta_slow,
        "Qwen2.5's yarn rope_scaling");
  CHECK_OK(eng_config_save(&c, cfg_path, "float32", NULL, NULL, &e), &e);
  CHECK_OK(eng_config_load(NULL, cfg_path, &back, &e), &e);
  CHECK(!memcmp(&back, &c, sizeof c), "yarn RoPE does not survive save and load");
}

// Mistral: sliding_window sizes the window; null is none; absent is
// MistralConfig's 4096; a negative one is refused.
static void test_mistral(void) {
  char src[1024];
  json_t *m = fixture_config("mistral", src, sizeof src);
  eng_config c = load_ok(json_deep_copy(m));
  CHECK(c.arch == ENG_ARCH_MISTRAL && c.head_dim == 24 && c.n_heads * c.head_dim != c.d_model && !c.window,
        "the mistral fixture");
  json_t *o = json_deep_copy(m);
  put(o, "sliding_window", json_integer(4096));
  CHECK(load_ok(o).window == 4096, "sliding_window 4096");
  o = json_deep_copy(m);
  json_object_del(o, "sliding_window");
  CHECK(load_ok(o).window == 4096, "an absent sliding_window is MistralConfig's 4096");
  o = json_deep_copy(m);
  put(o, "sliding_window", json_integer(-3));
  refused(o, ENG_EINVAL, "sliding_window");
  json_decref(m);
}

// Every fixture that tests/ref/gen_fixtures.py wrote with transformers loads.
static void test_fixtures(void) {
  char root[1024];
  snprintf(root, sizeof root, "%s/tests/fixtures", TRAIND_SOURCE_DIR);
  DIR *d = opendir(root);
  if (!d) return;
  int n = 0;
  struct dirent *ent;
  while ((ent = readdir(d))) {
    char path[2048];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s/config.json", root, ent->d_name);
    if (ent->d_name[0] == '.' || stat(path, &st) != 0) continue;
    eng_config c;
    eng_err e = {0};
    CHECK_OK(eng_config_load(NULL, path, &c, &e), &e);
    n++;
  }
  closedir(d);
  printf("test_hf_config: %d fixture configs load\n", n);
}

int main(void) {
  tmp_make();
  static char path[600];
  snprintf(path, sizeof path, "%s", tmp_path("config.json"));
  cfg_path = path;
  test_roundtrip();
  test_defaults();
  test_refusals();
  test_validate_and_save_refusal();
  test_token_ids();
  test_vlm();
  test_rope_scaling();
  test_mistral();
  test_fixtures();
  tmp_cleanup();
  printf("test_hf_config: ok\n");
  return 0;
}
