// Hugging Face config.json <-> eng_config.
//
// Defaults follow what transformers itself does when a field is absent, since
// a model directory means what transformers makes of it; they differ by
// family, so they are the architecture row's (model/arch.c): e.g. Qwen2 and
// Qwen3 take 32 key/value heads when num_key_value_heads is absent (but the
// attention head count when it is null).
#include "model/config.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json_file.h"
#include "common/json_kind.h"
#include "kernels/kernels.h"
#include "model/atomic_file.h"
#include "model/rope.h"

// ---- typed field access ----------------------------------------------------
// Each getter leaves *out untouched when the field is absent or null, so the
// caller sets the default first. `key` is the name printed in messages.

static int wrong_type(const char *path, const char *key, const char *want, const json_t *v,
                      eng_err *e) {
  return eng_err_set(e, ENG_EINVAL, "%s: field \"%s\" must be %s, got %s", path, key, want,
                     eng_json_kind(v));
}

static int get_int(const json_t *obj, const char *path, const char *key, int *out, eng_err *e) {
  const json_t *v = json_object_get(obj, key);
  if (!v || json_is_null(v)) return ENG_OK;
  if (!json_is_integer(v)) return wrong_type(path, key, "an integer", v, e);
  json_int_t x = json_integer_value(v);
  if (x < INT_MIN || x > INT_MAX)
    return eng_err_set(e, ENG_EINVAL, "%s: field \"%s\" is %lld, outside the range of int", path,
                       key, (long long)x);
  *out = (int)x;
  return ENG_OK;
}

static int get_required_int(const json_t *obj, const char *path, const char *key, int *out,
                            eng_err *e) {
  const json_t *v = json_object_get(obj, key);
  if (!v) return eng_err_set(e, ENG_EINVAL, "%s: field \"%s\" is missing", path, key);
  if (json_is_null(v)) return wrong_type(path, key, "an integer", v, e);
  return get_int(obj, path, key, out, e);
}

static int get_float(const json_t *obj, const char *path, const char *key, float *out, eng_err *e) {
  const json_t *v = json_object_get(obj, key);
  if (!v || json_is_null(v)) return ENG_OK;
  if (!json_is_number(v)) return wrong_type(path, key, "a number", v, e);
  *out = (float)json_number_value(v);
  return ENG_OK;
}

static int get_bool(const json_t *obj, const char *path, const char *key, int *out, eng_err *e) {
  const json_t *v = json_object_get(obj, key);
  if (!v || json_is_null(v)) return ENG_OK;
  if (!json_is_boolean(v)) return wrong_type(path, key, "true or false", v, e);
  *out = json_is_true(v);
  return ENG_OK;
}

// A boolean feature the engine does not implement: false, null or absent pass.
static int refuse_true(const json_t *obj, const char *path, const char *key, const char *what,
                       eng_err *e) {
  int on = 0;
  int rc = get_bool(obj, path, key, &on, e);
  if (rc) return rc;
  if (on)
    return eng_err_set(e, ENG_ENOTSUP, "%s: field \"%s\" is true: %s is not supported", path, key,
                       what);
  return ENG_OK;
}

// ---- architecture ------------------------------------------------------------

// model_type decides; every entry of "architectures" must name the same
// causal-LM class (a base-model class such as "LlamaModel" stores its tensors
// without the "model." prefix, so it is refused too).
static int parse_arch(const json_t *root, const char *path, eng_arch *out, eng_err *e) {
  int arch = -1;
  const json_t *mt = json_object_get(root, "model_type");
  if (mt && !json_is_null(mt)) {
    if (!json_is_string(mt)) return wrong_type(path, "model_type", "a string", mt, e);
    arch = eng_arch_find(json_string_value(mt), 0);
    char list[256];
    if (arch < 0)
      return eng_err_set(e, ENG_ENOTSUP, "%s: field \"model_type\" is not one of %s", path,
                         eng_arch_list(list, sizeof list, 0, ", "));
  }
  const json_t *list = json_object_get(root, "architectures");
  if (list && !json_is_null(list)) {
    if (!json_is_array(list)) return wrong_type(path, "architectures", "an array", list, e);
    size_t i;
    const json_t *v;
    json_array_foreach(list, i, v) {
      if (!json_is_string(v)) return wrong_type(path, "architectures", "an array of strings", v, e);
      int a = eng_arch_find(json_string_value(v), 1);
      char list[512];
      if (a < 0)
        return eng_err_set(e, ENG_ENOTSUP, "%s: field \"architectures\" entry %zu is not one of %s", path,
                           i, eng_arch_list(list, sizeof list, 1, ", "));
      if (arch >= 0 && a != arch)
        return eng_err_set(
            e, ENG_EINVAL,
            "%s: field \"architectures\" entry %zu names %s but field \"model_type\" is %s", path,
            i, eng_arch_row_of(a)->hf_class, eng_arch_name(arch));
      arch = a;
    }
  }
  if (arch < 0) return eng_err_set(e, ENG_EINVAL, "%s: field \"model_type\" is missing", path);
  *out = (eng_arch)arch;
  return ENG_OK;
}

// ---- features the engine refuses -------------------------------------------

// Rotary embedding: transformers 5 writes "rope_parameters" {"rope_theta",
// "rope_type", and the type's keys}; older versions write a top-level
// "rope_theta" and the scaling in "rope_scaling" (its type as "type" or
// "rope_type"), which transformers 5 reads into rope_parameters. Both are
// read, rope_parameters last, so its keys win. A type model/rope.h lacks,
// and a key no type here reads, are refused by name.
static int parse_rope_obj(const json_t *rp, const char *path, const char *obj, const eng_arch_row *row,
                          eng_config *c, float *partial, eng_err *e) {
  if (!json_is_object(rp)) return wrong_type(path, obj, "an object", rp, e);
  const char *key;
  const json_t *v;
  char name[96];
  json_object_foreach((json_t *)rp, key, v) {
    snprintf(name, sizeof name, "%s.%s", obj, key);
    float *real = !strcmp(key, "rope_theta")         ? &c->rope_theta
                  : !strcmp(key, "factor")           ? &c->rope.factor
                  : !strcmp(key, "low_freq_factor")  ? &c->rope.low_freq_factor
                  : !strcmp(key, "high_freq_factor") ? &c->rope.high_freq_factor
                  : !strcmp(key, "attention_factor") ? &c->rope.attention_factor
                  : !strcmp(key, "beta_fast")        ? &c->rope.beta_fast
                  : !strcmp(key, "beta_slow")        ? &c->rope.beta_slow
                  : !strcmp(key, "mscale")           ? &c->rope.mscale
                  : !strcmp(key, "mscale_all_dim")   ? &c->rope.mscale_all_dim
                                                     : NULL;
    if (real) {
      if (!json_is_null(v) && !json_is_number(v)) return wrong_type(path, name, "a number", v, e);
      if (json_is_number(v)) *real = (float)json_number_value(v);
    } else if (!strcmp(key, "truncate")) {
      if (!json_is_null(v) && !json_is_boolean(v)) return wrong_type(path, name, "true or false", v, e);
      c->rope.no_truncate = json_is_false(v);
    } else if (!strcmp(key, "original_max_position_embeddings")) {
      if (!json_is_null(v) && !json_is_integer(v)) return wrong_type(path, name, "an integer", v, e);
      if (json_is_integer(v)) c->rope.original_max_pos = (int)json_integer_value(v);
    } else if (!strcmp(key, "rope_type") || !strcmp(key, "type")) {
      if (!json_is_string(v)) return wrong_type(path, name, "a string", v, e);
      int t = eng_rope_find(json_string_value(v));
      if (t < 0)
        return eng_err_set(e, ENG_ENOTSUP, "%s: field \"%s\" is \"%s\": that RoPE is not supported (%s, %s, %s and %s "
                           "are)", path, name, json_string_value(v), eng_rope_name(0), eng_rope_name(1),
                           eng_rope_name(2), eng_rope_name(3));
      c->rope.type = t;
    } else if (!strcmp(key, "partial_rotary_factor") && json_is_number(v) &&
               (json_number_value(v) == 1.0 || row->hybrid)) {
      *partial = (float)json_number_value(v); // a hybrid rotates part of each head
    } else if (row->hybrid && (!strcmp(key, "mrope_section") || !strcmp(key, "mrope_interleaved"))) {
      // Multimodal RoPE: a text model's three position streams are equal,
      // which makes it the plain rotation.
    } else {
      return eng_err_set(e, ENG_ENOTSUP, "%s: field \"%s\" is not supported (RoPE here reads rope_theta, rope_type "
                         "and the keys of the linear, llama3 and yarn types)", path, name);
    }
  }
  return ENG_OK;
}

// The keys the type needs (transformers refuses a config without them);
// `what` names the source.
static int check_rope(const char *path, const eng_config *c, eng_err *e) {
  const struct {
    const char *key;
    int missing;
  } need[] = {
      {"factor", c->rope.type != ENG_ROPE_DEFAULT && !(c->rope.factor > 0)},
      {"low_freq_factor", c->rope.type == ENG_ROPE_LLAMA3 && !(c->rope.low_freq_factor > 0)},
      {"high_freq_factor", c->rope.type == ENG_ROPE_LLAMA3 && !(c->rope.high_freq_factor > c->rope.low_freq_factor)},
      {"original_max_position_embeddings",
       (c->rope.type == ENG_ROPE_LLAMA3 || c->rope.type == ENG_ROPE_YARN) && c->rope.original_max_pos <= 0},
  };
  for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
    if (need[i].missing)
      return eng_err_set(e, ENG_EINVAL, "%s: field \"rope_parameters.%s\" is missing or out of range: rope_type %s "
                         "needs it%s", path, need[i].key, eng_rope_name(c->rope.type),
                         i == 2 ? " above low_freq_factor" : " positive");
  return ENG_OK;
}

static int parse_rope(const json_t *root, const char *path, const eng_arch_row *row, eng_config *c, float *partial,
                      eng_err *e) {
  int rc = get_float(root, path, "rope_theta", &c->rope_theta, e);
  const json_t *scaling = json_object_get(root, "rope_scaling"), *rp = json_object_get(root, "rope_parameters");
  if (!rc && scaling && !json_is_null(scaling))
    rc = parse_rope_obj(scaling, path, "rope_scaling", row, c, partial, e);
  if (!rc && rp && !json_is_null(rp)) rc = parse_rope_obj(rp, path, "rope_parameters", row, c, partial, e);
  return rc; // eng_config_validate checks the type's keys
}

// Mixture-of-experts configs of the families transformers knows carry one of
// these counts; any positive value means routed experts.
static const char *const moe_fields[] = {"num_experts",      "num_local_experts",
                                         "n_routed_experts", "num_experts_per_tok",
                                         "n_shared_experts", "moe_num_experts"};

static int refuse_unsupported(const json_t *root, const char *path, eng_arch arch, eng_err *e) {
  for (size_t i = 0; i < sizeof moe_fields / sizeof moe_fields[0]; i++) {
    int n = 0;
    int rc = get_int(root, path, moe_fields[i], &n, e);
    if (rc) return rc;
    if (n > 0)
      return eng_err_set(e, ENG_ENOTSUP,
                         "%s: field \"%s\" is %d: mixture-of-experts models are not supported",
                         path, moe_fields[i], n);
  }
  const json_t *act = json_object_get(root, "hidden_act");
  if (act && !json_is_null(act)) {
    if (!json_is_string(act)) return wrong_type(path, "hidden_act", "a string", act, e);
    if (strcmp(json_string_value(act), "silu") != 0)
      return eng_err_set(e, ENG_ENOTSUP,
                         "%s: field \"hidden_act\" is not \"silu\", the only activation supported",
                         path);
  }
  const eng_arch_row *row = eng_arch_row_of(arch);
  for (const eng_arch_refusal *x = row->refuse; x->key; x++) {
    int rc = refuse_true(root, path, x->key, x->what, e);
    if (rc) return rc;
  }
  const json_t *types = json_object_get(root, "layer_types");
  if (row->layer_types && types && !json_is_null(types)) {
    if (!json_is_array(types)) return wrong_type(path, "layer_types", "an array", types, e);
    size_t i;
    const json_t *v;
    json_array_foreach(types, i, v) {
      if (!json_is_string(v)) return wrong_type(path, "layer_types", "an array of strings", v, e);
      if (strcmp(json_string_value(v), "full_attention") != 0)
        return eng_err_set(e, ENG_ENOTSUP,
                           "%s: field \"layer_types\" entry %zu is not \"full_attention\", the "
                           "only attention supported",
                           path, i);
    }
  }
  return ENG_OK;
}

// ---- hybrid layers (Qwen3.5) ---------------------------------------------------------

// The Gated DeltaNet dims, which layers are full attention (layer_types, or
// full_attention_interval when it is absent: every full_every-th, the only
// pattern the layout knows), and the rotated dims of a head.
static int parse_hybrid(const json_t *root, const char *path, const eng_arch_hybrid *h, float partial,
                        eng_config *c, eng_err *e) {
  c->dn.k_heads = h->k_heads, c->dn.v_heads = h->v_heads, c->dn.k_dim = h->k_dim, c->dn.v_dim = h->v_dim;
  c->dn.conv = h->conv, c->full_every = h->full_every;
  int rc = get_int(root, path, "linear_num_key_heads", &c->dn.k_heads, e);
  if (!rc) rc = get_int(root, path, "linear_num_value_heads", &c->dn.v_heads, e);
  if (!rc) rc = get_int(root, path, "linear_key_head_dim", &c->dn.k_dim, e);
  if (!rc) rc = get_int(root, path, "linear_value_head_dim", &c->dn.v_dim, e);
  if (!rc) rc = get_int(root, path, "linear_conv_kernel_dim", &c->dn.conv, e);
  if (!rc) rc = get_int(root, path, "full_attention_interval", &c->full_every, e);
  if (rc) return rc;
  const json_t *types = json_object_get(root, "layer_types");
  if (types && !json_is_null(types)) {
    if (!json_is_array(types)) return wrong_type(path, "layer_types", "an array", types, e);
    if ((int)json_array_size(types) != c->n_layers)
      return eng_err_set(e, ENG_EINVAL, "%s: field \"layer_types\" has %zu entries for %d layers", path,
                         json_array_size(types), c->n_layers);
    c->full_every = 0;
    size_t i;
    const json_t *v;
    json_array_foreach(types, i, v) {
      const char *t = json_is_string(v) ? json_string_value(v) : NULL;
      if (!t || (strcmp(t, "full_attention") && strcmp(t, "linear_attention")))
        return eng_err_set(e, ENG_ENOTSUP, "%s: field \"layer_types\" entry %zu is not \"full_attention\" or "
                           "\"linear_attention\"", path, i);
      if (!c->full_every && strcmp(t, "full_attention") == 0) c->full_every = (int)i + 1;
    }
    if (!c->full_every) c->full_every = c->n_layers + 1; // none: every layer linear
    json_array_foreach(types, i, v) {
      if ((strcmp(json_string_value(v), "full_attention") == 0) != ((i + 1) % (size_t)c->full_every == 0))
        return eng_err_set(e, ENG_ENOTSUP, "%s: field \"layer_types\" entry %zu breaks the pattern of full "
                           "attention every %d layers, the only one supported", path, i, c->full_every);
    }
  }
  const int hd = c->head_dim;
  c->rope_dim = (int)((float)hd * partial); // transformers: int(head_dim * partial_rotary_factor)
  if (!(partial > 0 && partial <= 1) || c->rope_dim % 2 || c->rope_dim == 0)
    return eng_err_set(e, ENG_ENOTSUP, "%s: field \"partial_rotary_factor\" %g of head_dim %d rotates %d dims; "
                       "an even count from 2 to head_dim is supported", path, (double)partial, hd, c->rope_dim);
  if (c->rope_dim == hd) c->rope_dim = 0;
  return ENG_OK;
}

// ---- sliding window -------------------------------------------------------------

// The row's window key: a count of keys, null (none) or absent (the row's
// default).
static int parse_window(const json_t *root, const char *path, const eng_arch_row *row, eng_config *c, eng_err *e) {
  const json_t *v = json_object_get(root, row->window_key);
  c->window = v ? 0 : row->window_absent;
  int rc = get_int(root, path, row->window_key, &c->window, e);
  if (!rc && c->window < 0)
    rc = eng_err_set(e, ENG_EINVAL, "%s: field \"%s\" is %d: a window holds at least one key", path, row->window_key,
                     c->window);
  return rc;
}

// ---- token ids ---------------------------------------------------------------

// The token ids a model's config.json names, which transformers' generate
// reads (generation_config.json repeats them) and which an export keeps.
static const char *const token_id_fields[] = {"bos_token_id", "eos_token_id", "pad_token_id"};
enum { N_TOKEN_ID_FIELDS = sizeof token_id_fields / sizeof token_id_fields[0] };

// An integer or null; eos_token_id may also be a list of integers (Llama 3
// and Qwen end a turn on several tokens). Values are kept as they are: some
// checkpoints name ids past the vocabulary, or -1 for none.
static int check_token_id(const json_t *root, const char *path, const char *key, eng_err *e) {
  const json_t *v = json_object_get(root, key);
  const int list_ok = strcmp(key, "eos_token_id") == 0;
  const char *want = list_ok ? "an integer, a list of integers or null" : "an integer or null";
  if (!v || json_is_null(v) || json_is_integer(v)) return ENG_OK;
  if (!list_ok || !json_is_array(v)) return wrong_type(path, key, want, v, e);
  size_t i;
  const json_t *id;
  json_array_foreach(v, i, id) {
    if (!json_is_integer(id)) return wrong_type(path, key, want, id, e);
  }
  return ENG_OK;
}

static int check_token_ids(const json_t *root, const char *path, eng_err *e) {
  for (int i = 0; i < N_TOKEN_ID_FIELDS; i++) {
    int rc = check_token_id(root, path, token_id_fields[i], e);
    if (rc) return rc;
  }
  return ENG_OK;
}

// ---- load --------------------------------------------------------------------

static int parse(const json_t *root, const char *path, eng_config *c, eng_err *e) {
  memset(c, 0, sizeof *c);
  int rc = parse_arch(root, path, &c->arch, e);
  if (!rc) rc = refuse_unsupported(root, path, c->arch, e);
  if (!rc) rc = get_required_int(root, path, "vocab_size", &c->vocab, e);
  if (!rc) rc = get_required_int(root, path, "hidden_size", &c->d_model, e);
  if (!rc) rc = get_required_int(root, path, "num_hidden_layers", &c->n_layers, e);
  if (!rc) rc = get_required_int(root, path, "num_attention_heads", &c->n_heads, e);
  if (!rc) rc = get_required_int(root, path, "intermediate_size", &c->d_ff, e);
  if (rc) return rc;

  const eng_arch_row *row = eng_arch_row_of(c->arch);
  const json_t *kv = json_object_get(root, "num_key_value_heads");
  c->n_kv_heads = row->kv_heads_absent && !kv ? row->kv_heads_absent : c->n_heads;
  const json_t *hd = json_object_get(root, "head_dim");
  if (!hd && row->head_dim_absent) {
    c->head_dim = row->head_dim_absent;
  } else if ((!hd || json_is_null(hd)) && c->n_heads > 0) {
    if (c->d_model % c->n_heads != 0)
      return eng_err_set(e, ENG_EINVAL,
                         "%s: field \"head_dim\" is not given and \"hidden_size\" %d is not a "
                         "multiple of \"num_attention_heads\" %d",
                         path, c->d_model, c->n_heads);
    c->head_dim = c->d_model / c->n_heads;
  }
  c->max_pos = row->max_pos_absent;
  c->rope_theta = 10000.0f;
  c->rms_eps = 1e-6f;
  c->init_std = 0.02f;
  eng_arch_apply(c, c->arch);

  rc = get_int(root, path, "num_key_value_heads", &c->n_kv_heads, e);
  if (!rc) rc = get_int(root, path, "head_dim", &c->head_dim, e);
  if (!rc) rc = get_int(root, path, "max_position_embeddings", &c->max_pos, e);
  float partial = row->hybrid ? row->hybrid->partial_rotary : 1.0f;
  if (!rc && row->hybrid) rc = get_float(root, path, "partial_rotary_factor", &partial, e);
  if (!rc) rc = parse_rope(root, path, row, c, &partial, e);
  if (!rc && row->hybrid) rc = parse_hybrid(root, path, row->hybrid, partial, c, e);
  if (!rc && row->window_key) rc = parse_window(root, path, row, c, e);
  if (!rc) rc = get_float(root, path, "rms_norm_eps", &c->rms_eps, e);
  if (!rc) rc = get_float(root, path, "initializer_range", &c->init_std, e);
  if (!rc) rc = get_bool(root, path, "tie_word_embeddings", &c->tie_embeddings, e);
  // An export writes them back, so a bad one is refused before training.
  if (!rc) rc = check_token_ids(root, path, e);
  if (!rc) rc = eng_config_validate(c, path, e);
  return rc;
}

// The JSON object of a config.json file, for the caller to release.
static int load_object(const eng_fs *fs, const char *path, json_t **root, eng_err *e) {
  int rc = eng_json_load(fs, path, root, e);
  if (rc || json_is_object(*root)) return rc;
  rc = eng_err_set(e, ENG_EINVAL, "%s: must hold a JSON object, not %s", path,
                       eng_json_kind(*root));
  json_decref(*root);
  *root = NULL;
  return rc;
}

// ---- multimodal checkpoints ------------------------------------------------------

// The family whose multimodal wrapper root's model_type or architectures
// name (arch.h's vlm_*), or -1. The names must agree with each other.
static int vlm_arch(const json_t *root, const char *path, int *arch, eng_err *e) {
  *arch = -1;
  const json_t *mt = json_object_get(root, "model_type"), *list = json_object_get(root, "architectures");
  if (json_is_string(mt)) *arch = eng_arch_find_vlm(json_string_value(mt), 0);
  const json_t *first = json_is_array(list) ? json_array_get(list, 0) : NULL;
  if (*arch < 0 && json_is_string(first)) *arch = eng_arch_find_vlm(json_string_value(first), 1);
  if (*arch < 0) return ENG_OK;
  const eng_arch_row *row = eng_arch_row_of((eng_arch)*arch);
  if (mt && !json_is_null(mt) && (!json_is_string(mt) || strcmp(json_string_value(mt), row->vlm_type)))
    return eng_err_set(e, ENG_EINVAL, "%s: field \"model_type\" is not %s, the type of class %s", path,
                       row->vlm_type, row->vlm_class);
  size_t i;
  const json_t *v;
  json_array_foreach(list, i, v) {
    if (!json_is_string(v) || strcmp(json_string_value(v), row->vlm_class))
      return eng_err_set(e, ENG_EINVAL, "%s: field \"architectures\" entry %zu is not %s, the class of "
                         "model_type %s", path, i, row->vlm_class, row->vlm_type);
  }
  return ENG_OK;
}

// A multimodal checkpoint's text model: its text_config read as a config of
// the family's text class (model_type filled in when absent), tied as the
// top level says, since transformers ties by the wrapper's config.
static int parse_vlm(const json_t *root, const char *path, eng_arch arch, eng_config *c, eng_err *e) {
  const eng_arch_row *row = eng_arch_row_of(arch);
  const json_t *tc = json_object_get(root, "text_config");
  if (!tc) return eng_err_set(e, ENG_EINVAL, "%s: field \"text_config\" is missing", path);
  if (!json_is_object(tc)) return wrong_type(path, "text_config", "an object", tc, e);
  char where[4200];
  snprintf(where, sizeof where, "%s: text_config", path);
  const json_t *mt = json_object_get(tc, "model_type");
  if (mt && (!json_is_string(mt) || strcmp(json_string_value(mt), row->model_type)))
    return eng_err_set(e, ENG_EINVAL, "%s: field \"model_type\" is not %s, the text model of %s", where,
                       row->model_type, row->vlm_class);
  json_t *text = json_deep_copy(tc);
  int rc = !text ? eng_err_set(e, ENG_ENOMEM, "%s: out of memory", path) : ENG_OK;
  if (!rc && !json_object_get(text, "model_type") && json_object_set_new(text, "model_type", json_string(row->model_type)))
    rc = eng_err_set(e, ENG_ENOMEM, "%s: out of memory", path);
  if (!rc) rc = parse(text, where, c, e);
  json_decref(text);
  if (rc) return rc;
  c->tie_embeddings = 0; // Qwen3_5Config's default
  if ((rc = get_bool(root, path, "tie_word_embeddings", &c->tie_embeddings, e))) return rc;
  c->vlm = 1;
  return ENG_OK;
}

int eng_config_load(const eng_fs *fs, const char *path, eng_config *c, eng_err *e) {
  json_t *root;
  int rc = load_object(fs, path, &root, e), vlm = -1;
  if (rc) return rc;
  rc = vlm_arch(root, path, &vlm, e);
  if (!rc) rc = vlm < 0 ? parse(root, path, c, e) : parse_vlm(root, path, (eng_arch)vlm, c, e);
  json_decref(root);
  return rc;
}

// ---- validate ------------------------------------------------------------------

int eng_config_validate(const eng_config *c, const char *what, eng_err *e) {
  const eng_arch_row *row = eng_arch_row_of(c->arch);
  if (!row) return eng_err_set(e, ENG_EINVAL, "%s: architecture %d is unknown", what, (int)c->arch);
  const struct {
    const char *key;
    int v;
  } sizes[] = {
      {"vocab_size", c->vocab},
      {"hidden_size", c->d_model},
      {"num_hidden_layers", c->n_layers},
      {"num_attention_heads", c->n_heads},
      {"num_key_value_heads", c->n_kv_heads},
      {"head_dim", c->head_dim},
      {"intermediate_size", c->d_ff},
      {"max_position_embeddings", c->max_pos},
  };
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
    if (sizes[i].v <= 0)
      return eng_err_set(e, ENG_EINVAL, "%s: field \"%s\" must be positive, got %d", what,
                         sizes[i].key, sizes[i].v);
  if (c->n_heads % c->n_kv_heads != 0)
    return eng_err_set(e, ENG_EINVAL,
                       "%s: field \"num_attention_heads\" %d is not a multiple of "
                       "\"num_key_value_heads\" %d",
                       what, c->n_heads, c->n_kv_heads);
  // The attention and RoPE kernels keep a head's tile on the stack and
  // rotate pairs (i, i + hd/2).
  if (c->head_dim > ENG_K_MAX_HD || c->head_dim % 2)
    return eng_err_set(e, ENG_ENOTSUP, "%s: field \"head_dim\" %d is not supported (even values up to %d are)",
                       what, c->head_dim, ENG_K_MAX_HD);
  // The layout computes heads * head_dim in int.
  if (c->n_heads > INT_MAX / c->head_dim)
    return eng_err_set(e, ENG_EINVAL,
                       "%s: field \"head_dim\" %d times \"num_attention_heads\" %d overflows", what,
                       c->head_dim, c->n_heads);
  // transformers 5 refuses such a Llama config, so the engine must not write one.
  if (row->heads_divide_hidden && c->d_model % c->n_heads != 0)
    return eng_err_set(e, ENG_EINVAL,
                       "%s: field \"hidden_size\" %d is not a multiple of \"num_attention_heads\" "
                       "%d, which %s requires",
                       what, c->d_model, c->n_heads, row->hf_class);
  const struct {
    const char *key;
    float v;
    int zero_ok;
  } reals[] = {
      {"rope_theta", c->rope_theta, 0},
      {"rms_norm_eps", c->rms_eps, 0},
      {"initializer_range", c->init_std, 1},
  };
  for (size_t i = 0; i < sizeof reals / sizeof reals[0]; i++)
    if (!isfinite(reals[i].v) || reals[i].v < 0 || (reals[i].v == 0 && !reals[i].zero_ok))
      return eng_err_set(e, ENG_EINVAL, "%s: field \"%s\" must be a finite %s number, got %g", what,
                         reals[i].key, reals[i].zero_ok ? "non-negative" : "positive",
                         (double)reals[i].v);
  // The architecture alone tells transformers which tensors exist, so the
  // flags must be the ones it implies.
  if (!row->hybrid != !c->full_every)
    return eng_err_set(e, ENG_EINVAL, "%s: architecture %s %s hybrid layers", what, row->model_type,
                       row->hybrid ? "needs" : "has no");
  if (c->attn_gate != (row->hybrid != NULL) || c->norm_plus_one != (row->hybrid != NULL))
    return eng_err_set(e, ENG_EINVAL, "%s: the output gate and zero-centred norms are the hybrid architecture's",
                       what);
  if (c->qkv_bias != row->qkv_bias || c->qk_norm != row->qk_norm)
    return eng_err_set(e, ENG_EINVAL,
                       "%s: qkv_bias %d and qk_norm %d do not match architecture %s (which has %d and %d)",
                       what, c->qkv_bias, c->qk_norm, row->model_type, row->qkv_bias, row->qk_norm);
  if (c->full_every < 0) // past n_layers: no layer is full attention
    return eng_err_set(e, ENG_EINVAL, "%s: full attention every %d layers", what, c->full_every);
  if (c->full_every || c->dn.v_heads) {
    if (c->dn.k_heads <= 0 || c->dn.v_heads <= 0 || c->dn.k_dim <= 0 || c->dn.v_dim <= 0 || c->dn.conv <= 0)
      return eng_err_set(e, ENG_EINVAL, "%s: Gated DeltaNet layers need positive linear_num_key_heads, "
                         "linear_num_value_heads, linear_key_head_dim, linear_value_head_dim and "
                         "linear_conv_kernel_dim", what);
    if (c->dn.v_heads % c->dn.k_heads || c->dn.v_heads > ENG_K_DN_MAX_V_HEADS || c->dn.conv > ENG_K_CONV_MAX)
      return eng_err_set(e, ENG_ENOTSUP, "%s: %d linear value heads over %d key heads, conv %d: the value heads "
                         "must be a multiple of the key heads and at most %d, the conv at most %d", what,
                         c->dn.v_heads, c->dn.k_heads, c->dn.conv, ENG_K_DN_MAX_V_HEADS, ENG_K_CONV_MAX);
  }
  // The gate rides in q_proj's rows between the heads' queries, so the q/k
  // norms (which write q out of them) must be there to de-interleave it.
  if (c->attn_gate && !c->qk_norm)
    return eng_err_set(e, ENG_EINVAL, "%s: an attention output gate needs q/k norms", what);
  if (c->window < 0 || (c->window && !row->window_key))
    return eng_err_set(e, ENG_EINVAL, "%s: a sliding window of %d keys, which %s does not have", what, c->window,
                       row->hf_class);
  if ((unsigned)c->rope.type >= ENG_ROPE_TYPES)
    return eng_err_set(e, ENG_EINVAL, "%s: RoPE type %d is unknown", what, c->rope.type);
  int rc = check_rope(what, c, e);
  if (rc) return rc;
  if (c->rope_dim < 0 || c->rope_dim > c->head_dim || c->rope_dim % 2)
    return eng_err_set(e, ENG_EINVAL, "%s: %d rotary dims of head_dim %d: must be even and at most head_dim", what,
                       c->rope_dim, c->head_dim);
  if (c->tie_embeddings != 0 && c->tie_embeddings != 1)
    return eng_err_set(e, ENG_EINVAL, "%s: field \"tie_word_embeddings\" must be 0 or 1, got %d",
                       what, c->tie_embeddings);
  return ENG_OK;
}

// ---- save ----------------------------------------------------------------------

// The shortest decimal that reads back as the same float, so that 1e-6f is
// written "1e-06" and not "9.99999997e-07".
static json_t *json_float(float f) {
  char buf[32];
  for (int digits = 1; digits <= 9; digits++) {
    snprintf(buf, sizeof buf, "%.*g", digits, (double)f);
    if (strtof(buf, NULL) == f) break;
  }
  return json_real(strtod(buf, NULL));
}

static int set(json_t *obj, const char *key, json_t *v) { return json_object_set_new(obj, key, v); }

// A hybrid's keys as Qwen3_5TextConfig reads them: layer_types spelled out.
static int save_hybrid(json_t *o, json_t *rope, const eng_config *c) {
  json_t *types = json_array();
  int bad = !types;
  for (int l = 0; !bad && l < c->n_layers; l++)
    bad |= json_array_append_new(types, json_string((l + 1) % c->full_every ? "linear_attention" : "full_attention"));
  bad |= set(o, "layer_types", types);
  bad |= set(o, "linear_num_key_heads", json_integer(c->dn.k_heads));
  bad |= set(o, "linear_num_value_heads", json_integer(c->dn.v_heads));
  bad |= set(o, "linear_key_head_dim", json_integer(c->dn.k_dim));
  bad |= set(o, "linear_value_head_dim", json_integer(c->dn.v_dim));
  bad |= set(o, "linear_conv_kernel_dim", json_integer(c->dn.conv));
  const int rd = c->rope_dim ? c->rope_dim : c->head_dim;
  bad |= set(rope, "partial_rotary_factor", json_float((float)rd / (float)c->head_dim));
  return bad;
}

// The RoPE type and its keys into rope_parameters, and for transformers 4.x
// (which reads rope_scaling) a rope_scaling of a type other than default.
static int save_rope_type(json_t *o, json_t *rope, const eng_config *c) {
  json_t *sc = c->rope.type == ENG_ROPE_DEFAULT ? NULL : json_object();
  int bad = c->rope.type != ENG_ROPE_DEFAULT && !sc;
  json_t *dst[2] = {rope, sc};
  for (int i = 0; i < 2 && dst[i]; i++) {
    bad |= set(dst[i], "rope_type", json_string(eng_rope_name(c->rope.type)));
    if (c->rope.type == ENG_ROPE_DEFAULT) continue;
    bad |= set(dst[i], "factor", json_float(c->rope.factor));
    if (c->rope.type == ENG_ROPE_LINEAR) continue;
    bad |= set(dst[i], "original_max_position_embeddings", json_integer(c->rope.original_max_pos));
    if (c->rope.type == ENG_ROPE_LLAMA3) {
      bad |= set(dst[i], "low_freq_factor", json_float(c->rope.low_freq_factor));
      bad |= set(dst[i], "high_freq_factor", json_float(c->rope.high_freq_factor));
      continue;
    }
    const struct {
      const char *key;
      float v;
    } yarn[] = {{"attention_factor", c->rope.attention_factor}, {"beta_fast", c->rope.beta_fast},
                {"beta_slow", c->rope.beta_slow},               {"mscale", c->rope.mscale},
                {"mscale_all_dim", c->rope.mscale_all_dim}};
    for (size_t k = 0; k < sizeof yarn / sizeof yarn[0]; k++)
      if (yarn[k].v) bad |= set(dst[i], yarn[k].key, json_float(yarn[k].v));
    if (c->rope.no_truncate) bad |= set(dst[i], "truncate", json_false());
  }
  if (sc) bad |= set(o, "rope_scaling", sc);
  return bad;
}

// Sets o's token-id fields to those of the config.json at ids_from.
static int copy_token_ids(json_t *o, const eng_fs *fs, const char *ids_from, eng_err *e) {
  json_t *src;
  int rc = load_object(fs, ids_from, &src, e);
  if (!rc) rc = check_token_ids(src, ids_from, e);
  for (int i = 0; !rc && i < N_TOKEN_ID_FIELDS; i++) {
    json_t *v = json_object_get(src, token_id_fields[i]);
    if (v && json_object_set(o, token_id_fields[i], v))
      rc = eng_err_set(e, ENG_ENOMEM, "%s: out of memory copying its token ids", ids_from);
  }
  json_decref(src);
  return rc;
}

// The config.json of text model c: architectures, model_type, the sizes, what
// the row refuses written off; NULL when out of memory.
static json_t *text_config_json(const eng_config *c, const char *dtype_name) {
  json_t *o = json_object(), *arch_list = json_array(), *rope = json_object();
  const eng_arch_row *row = eng_arch_row_of(c->arch);
  int bad = !o || !arch_list || !rope;
  bad |= json_array_append_new(arch_list, json_string(row->hf_class));
  bad |= set(o, "architectures", arch_list);
  bad |= set(o, "model_type", json_string(row->model_type));
  bad |= set(o, "vocab_size", json_integer(c->vocab));
  bad |= set(o, "hidden_size", json_integer(c->d_model));
  bad |= set(o, "intermediate_size", json_integer(c->d_ff));
  bad |= set(o, "num_hidden_layers", json_integer(c->n_layers));
  bad |= set(o, "num_attention_heads", json_integer(c->n_heads));
  bad |= set(o, "num_key_value_heads", json_integer(c->n_kv_heads));
  bad |= set(o, "head_dim", json_integer(c->head_dim));
  bad |= set(o, "hidden_act", json_string("silu"));
  bad |= set(o, "max_position_embeddings", json_integer(c->max_pos));
  bad |= set(o, "rms_norm_eps", json_float(c->rms_eps));
  bad |= set(o, "initializer_range", json_float(c->init_std));
  bad |= set(o, "tie_word_embeddings", json_boolean(c->tie_embeddings));
  // transformers 4.x reads the top-level rope_theta, 5.x rope_parameters.
  bad |= set(o, "rope_theta", json_float(c->rope_theta));
  bad |= set(rope, "rope_theta", json_float(c->rope_theta));
  bad |= save_rope_type(o, rope, c);
  bad |= set(o, "rope_parameters", rope);
  // "torch_dtype" until transformers 4.55, "dtype" since.
  bad |= set(o, "torch_dtype", json_string(dtype_name));
  bad |= set(o, "dtype", json_string(dtype_name));
  if (row->hybrid) bad |= save_hybrid(o, rope, c);
  if (row->window_key) bad |= set(o, row->window_key, c->window ? json_integer(c->window) : json_null());
  // What the row refuses is written off, so the export means what was trained.
  for (const eng_arch_refusal *x = row->refuse; x->key; x++) bad |= set(o, x->key, json_false());
  for (const char *const *k = row->save_null; *k; k++) bad |= set(o, *k, json_null());
  if (bad) json_decref(o);
  return bad ? NULL : o;
}

// A multimodal checkpoint's config.json: the source's (its vision config,
// token ids, everything the engine does not hold) with the text model's
// config in text_config and the dtype written.
static int vlm_config_json(const eng_config *c, const char *dtype_name, const eng_fs *fs, const char *src,
                           json_t **out, eng_err *e) {
  if (!src)
    return eng_err_set(e, ENG_EINVAL, "%s's text model is exported into its source's config.json (its "
                       "vision_config), and no source directory was given", eng_arch_row_of(c->arch)->vlm_class);
  int vlm, rc = load_object(fs, src, out, e);
  if (!rc) rc = vlm_arch(*out, src, &vlm, e);
  if (!rc && vlm != (int)c->arch)
    rc = eng_err_set(e, ENG_EINVAL, "%s: not a %s config", src, eng_arch_row_of(c->arch)->vlm_class);
  json_t *text = rc ? NULL : text_config_json(c, dtype_name);
  if (!rc && !text) rc = eng_err_set(e, ENG_ENOMEM, "%s: out of memory", src);
  if (!rc) {
    json_object_del(text, "architectures");
    json_object_del(text, "torch_dtype");
    int bad = set(*out, "text_config", text);
    bad |= set(*out, "tie_word_embeddings", json_boolean(c->tie_embeddings));
    bad |= set(*out, "dtype", json_string(dtype_name));
    if (bad) rc = eng_err_set(e, ENG_ENOMEM, "%s: out of memory", src);
  }
  if (rc) json_decref(*out), *out = NULL;
  return rc;
}

int eng_config_save(const eng_config *c, const char *path, const char *dtype_name,
                    const eng_fs *ids_fs, const char *ids_from, eng_err *e) {
  int rc = eng_config_validate(c, path, e);
  if (rc) return rc;
  json_t *o = NULL;
  if (c->vlm) {
    rc = vlm_config_json(c, dtype_name, ids_fs, ids_from, &o, e);
  } else {
    o = text_config_json(c, dtype_name);
    if (!o) rc = eng_err_set(e, ENG_ENOMEM, "%s: out of memory building config.json", path);
    if (!rc && ids_from) rc = copy_token_ids(o, ids_fs, ids_from, e);
  }
  char *text = rc ? NULL : json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(9));
  json_decref(o);
  if (rc) return rc;
  if (!text) return eng_err_set(e, ENG_ENOMEM, "%s: out of memory building config.json", path);
  eng_afile f;
  rc = eng_afile_open(&f, path, e);
  if (!rc) rc = eng_afile_write(&f, text, strlen(text), e);
  if (!rc) rc = eng_afile_write(&f, "\n", 1, e);
  if (!rc)
    rc = eng_afile_commit(&f, e);
  else
    eng_afile_abort(&f);
  free(text);
  return rc;
}
