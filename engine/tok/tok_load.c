// Reading tokenizer.json into an eng_tok: every component checked against
// what tok.h implements, the rest refused by name. Messages name the file
// and the JSON path of the field ("model.merges[12]"), never token text.
#define _POSIX_C_SOURCE 200809L // strdup under -std=c17

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/json_file.h"
#include "common/json_kind.h"
#include "common/hash.h"
#include "tok/tok_impl.h"

// GPT-2's pre-tokenization regex, which ByteLevel applies when use_regex.
static const char GPT2_PATTERN[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

// A component's "type", or NULL when it has none.
static const char *type_of(const json_t *v) {
  const json_t *ty = json_is_object(v) ? json_object_get(v, "type") : NULL;
  return json_is_string(ty) ? json_string_value(ty) : NULL;
}

// A boolean field: absent means dflt; anything but true/false is refused.
static int get_bool(const eng_tok *t, const json_t *obj, const char *key, const char *where, int dflt, int *out,
                    eng_err *e) {
  const json_t *v = json_object_get(obj, key);
  if (!v || json_is_null(v)) {
    *out = dflt;
    return ENG_OK;
  }
  if (!json_is_boolean(v))
    return eng_err_set(e, ENG_EINVAL, "%s: %s.%s must be true or false, not %s", t->name, where, key,
                       eng_json_kind(v));
  *out = json_is_true(v);
  return ENG_OK;
}

static int compile_regex(eng_tok *t, const char *pat, size_t len, int literal, pcre2_code **out, const char *where,
                         eng_err *e) {
  int err;
  PCRE2_SIZE at;
  uint32_t opts = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0);
  *out = pcre2_compile((PCRE2_SPTR)pat, len, opts, &err, &at, NULL);
  if (!*out) {
    PCRE2_UCHAR msg[160];
    pcre2_get_error_message(err, msg, sizeof msg);
    return eng_err_set(e, ENG_ENOTSUP, "%s: %s: the regex cannot be compiled at offset %zu: %s", t->name, where,
                       (size_t)at, (char *)msg);
  }
  // JIT makes the splits several times faster; without it (an unusual
  // build of PCRE2) the interpreter gives the same matches.
  pcre2_jit_compile(*out, PCRE2_JIT_COMPLETE);
  return ENG_OK;
}

typedef int (*load_fn)(eng_tok *t, const json_t *v, const char *where, eng_err *e);

// A Sequence component: fn on each member of its list `key`, in order.
static int load_sequence(eng_tok *t, const json_t *seq, const char *key, const char *where, load_fn fn, eng_err *e) {
  const json_t *list = json_object_get(seq, key);
  if (!json_is_array(list)) return eng_err_set(e, ENG_EINVAL, "%s: %s.%s must be an array", t->name, where, key);
  size_t i;
  const json_t *c;
  json_array_foreach(list, i, c) {
    int rc = fn(t, c, where, e);
    if (rc) return rc;
  }
  return ENG_OK;
}

static int load_normalizer(eng_tok *t, const json_t *n, const char *where, eng_err *e) {
  if (!n || json_is_null(n)) return ENG_OK;
  const char *ty = type_of(n);
  if (!ty) return eng_err_set(e, ENG_EINVAL, "%s: %s has no \"type\"", t->name, where);
  if (!strcmp(ty, "Sequence")) return load_sequence(t, n, "normalizers", where, load_normalizer, e);
  enum tok_norm_kind k;
  if (!strcmp(ty, "NFC")) k = TOK_NFC;
  else if (!strcmp(ty, "NFD")) k = TOK_NFD;
  else if (!strcmp(ty, "NFKC")) k = TOK_NFKC;
  else if (!strcmp(ty, "NFKD")) k = TOK_NFKD;
  else
    return eng_err_set(e, ENG_ENOTSUP, "%s: %s: the %s normalizer is not implemented (NFC, NFD, NFKC, NFKD are)",
                       t->name, where, ty);
  if (t->n_norm == (int)(sizeof t->norm / sizeof t->norm[0]))
    return eng_err_set(e, ENG_ENOTSUP, "%s: %s: more than %zu normalizers", t->name, where,
                       sizeof t->norm / sizeof t->norm[0]);
  t->norm[t->n_norm++] = k;
  return ENG_OK;
}

static int add_pre(eng_tok *t, const char *where, tok_pre **out, eng_err *e) {
  if (t->n_pre == (int)(sizeof t->pre / sizeof t->pre[0]))
    return eng_err_set(e, ENG_ENOTSUP, "%s: %s: more than %zu pre-tokenizers", t->name, where,
                       sizeof t->pre / sizeof t->pre[0]);
  *out = &t->pre[t->n_pre++];
  memset(*out, 0, sizeof **out);
  return ENG_OK;
}

static int load_split(eng_tok *t, const json_t *p, const char *where, eng_err *e) {
  tok_pre *s = NULL;
  int rc = add_pre(t, where, &s, e);
  if (rc) return rc;
  s->kind = TOK_PRE_SPLIT;
  const json_t *pat = json_object_get(p, "pattern");
  const json_t *re = json_is_object(pat) ? json_object_get(pat, "Regex") : NULL;
  const json_t *lit = json_is_object(pat) ? json_object_get(pat, "String") : NULL;
  const json_t *str = json_is_string(re) ? re : lit;
  if (!json_is_string(str))
    return eng_err_set(e, ENG_EINVAL, "%s: %s.pattern must be {\"Regex\": string} or {\"String\": string}", t->name,
                       where);
  if ((rc = compile_regex(t, json_string_value(str), json_string_length(str), str == lit, &s->re, where, e)))
    return rc;
  static const char *const names[] = {"Isolated", "Removed", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
  const char *b = json_string_value(json_object_get(p, "behavior"));
  int found = 0;
  for (int i = 0; b && i < 5; i++)
    if (!strcmp(b, names[i])) s->behavior = (enum tok_split_behavior)i, found = 1;
  if (!found)
    return eng_err_set(e, ENG_EINVAL,
                       "%s: %s.behavior must be Isolated, Removed, MergedWithPrevious, MergedWithNext or Contiguous",
                       t->name, where);
  return get_bool(t, p, "invert", where, 0, &s->invert, e);
}

static int load_pre(eng_tok *t, const json_t *p, const char *where, eng_err *e) {
  if (!p || json_is_null(p)) return ENG_OK;
  const char *ty = type_of(p);
  if (!ty) return eng_err_set(e, ENG_EINVAL, "%s: %s has no \"type\"", t->name, where);
  if (!strcmp(ty, "Sequence")) return load_sequence(t, p, "pretokenizers", where, load_pre, e);
  if (!strcmp(ty, "Split")) return load_split(t, p, where, e);
  if (!strcmp(ty, "ByteLevel")) {
    tok_pre *s = NULL;
    int rc = add_pre(t, where, &s, e), use_regex = 1;
    if (rc) return rc;
    s->kind = TOK_PRE_BYTELEVEL;
    if ((rc = get_bool(t, p, "add_prefix_space", where, 1, &s->add_prefix_space, e))) return rc;
    if ((rc = get_bool(t, p, "use_regex", where, 1, &use_regex, e))) return rc;
    if (use_regex && (rc = compile_regex(t, GPT2_PATTERN, sizeof GPT2_PATTERN - 1, 0, &s->re, where, e))) return rc;
    return ENG_OK;
  }
  return eng_err_set(e, ENG_ENOTSUP, "%s: %s: the %s pre-tokenizer is not implemented (Split, ByteLevel are)",
                     t->name, where, ty);
}

static int load_decoder(eng_tok *t, const json_t *d, eng_err *e) {
  const char *ty = type_of(d);
  if (ty && !strcmp(ty, "Sequence")) {
    const json_t *list = json_object_get(d, "decoders");
    if (json_is_array(list) && json_array_size(list) == 1) return load_decoder(t, json_array_get(list, 0), e);
  }
  if (ty && !strcmp(ty, "ByteLevel")) return ENG_OK;
  return eng_err_set(e, ENG_ENOTSUP, "%s: decoder: %s%s is not implemented (ByteLevel is)", t->name,
                     ty ? "the decoder " : "", ty ? ty : "a missing decoder");
}

static int load_post(eng_tok *t, const json_t *p, const char *where, eng_err *e) {
  if (!p || json_is_null(p)) return ENG_OK;
  const char *ty = type_of(p);
  if (ty && !strcmp(ty, "Sequence")) return load_sequence(t, p, "processors", where, load_post, e);
  if (ty && !strcmp(ty, "ByteLevel")) return ENG_OK; // offsets only
  if (!ty || strcmp(ty, "TemplateProcessing"))
    return eng_err_set(e, ENG_ENOTSUP,
                       "%s: post_processor: the %s post-processor is not implemented (TemplateProcessing, ByteLevel "
                       "are)",
                       t->name, ty ? ty : "untyped");
  if (t->tmpl_pre || t->tmpl_post)
    return eng_err_set(e, ENG_ENOTSUP, "%s: post_processor: more than one TemplateProcessing", t->name);
  const json_t *single = json_object_get(p, "single"), *specials = json_object_get(p, "special_tokens");
  if (!json_is_array(single) || !json_is_object(specials))
    return eng_err_set(e, ENG_EINVAL, "%s: post_processor.single must be an array and special_tokens an object",
                       t->name);
  // Room for every id of every special token the templates may name.
  size_t n = 0, i;
  const char *key;
  const json_t *item;
  json_object_foreach((json_t *)specials, key, item) n += json_array_size(json_object_get(item, "ids"));
  n *= json_array_size(single);
  t->tmpl_pre = malloc((n + 1) * sizeof *t->tmpl_pre);
  t->tmpl_post = malloc((n + 1) * sizeof *t->tmpl_post);
  if (!t->tmpl_pre || !t->tmpl_post) return eng_err_set(e, ENG_ENOMEM, "%s: cannot allocate the template", t->name);
  int seen_a = 0;
  json_array_foreach(single, i, item) {
    const json_t *st = json_object_get(item, "SpecialToken"), *sq = json_object_get(item, "Sequence");
    if (sq) {
      const char *id = json_string_value(json_object_get(sq, "id"));
      if (!id || strcmp(id, "A") || seen_a)
        return eng_err_set(e, ENG_EINVAL, "%s: post_processor.single[%zu]: the single template takes $A once",
                           t->name, i);
      seen_a = 1;
      continue;
    }
    const char *name = st ? json_string_value(json_object_get(st, "id")) : NULL;
    const json_t *ids = name ? json_object_get(json_object_get(specials, name), "ids") : NULL;
    if (!json_is_array(ids))
      return eng_err_set(e, ENG_EINVAL,
                         "%s: post_processor.single[%zu]: neither $A nor a special token of special_tokens", t->name,
                         i);
    size_t k;
    const json_t *id;
    json_array_foreach(ids, k, id) {
      if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) > INT32_MAX)
        return eng_err_set(e, ENG_EINVAL, "%s: post_processor.special_tokens: ids must be token ids", t->name);
      if (seen_a) t->tmpl_post[t->n_tmpl_post++] = (int32_t)json_integer_value(id);
      else t->tmpl_pre[t->n_tmpl_pre++] = (int32_t)json_integer_value(id);
    }
  }
  if (!seen_a) return eng_err_set(e, ENG_EINVAL, "%s: post_processor.single has no $A", t->name);
  return ENG_OK;
}

static int load_vocab(eng_tok *t, const json_t *vocab, eng_err *e) {
  if (!json_is_object(vocab)) return eng_err_set(e, ENG_EINVAL, "%s: model.vocab must be an object", t->name);
  if (tok_strmap_init(&t->vocab, (uint32_t)json_object_size(vocab)))
    return eng_err_set(e, ENG_ENOMEM, "%s: cannot allocate the vocabulary", t->name);
  const char *key;
  const json_t *v;
  json_object_foreach((json_t *)vocab, key, v) {
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= INT32_MAX)
      return eng_err_set(e, ENG_EINVAL, "%s: model.vocab: an entry's id is %s, not a token id", t->name,
                         eng_json_kind(v));
    int32_t id = (int32_t)json_integer_value(v);
    if (tok_strmap_put(&t->vocab, key, strlen(key), id))
      return eng_err_set(e, ENG_ENOMEM, "%s: cannot allocate the vocabulary", t->name);
    if (id + 1 > t->vocab_size) t->vocab_size = id + 1;
  }
  return ENG_OK;
}

static int merges_put(tok_merges *m, int32_t a, int32_t b, uint32_t rank, int32_t id) {
  uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
  uint64_t h = key * 0x9E3779B97F4A7C15ull;
  for (uint32_t i = (uint32_t)(h >> 32) & m->mask;; i = (i + 1) & m->mask) {
    if (m->slot[i].key == key) return 0; // a repeated merge keeps its first rank
    if (!m->slot[i].key) {
      m->slot[i] = (tok_merge){key, rank, id};
      return 1;
    }
  }
}

static int load_merges(eng_tok *t, const json_t *merges, eng_err *e) {
  if (!json_is_array(merges)) return eng_err_set(e, ENG_EINVAL, "%s: model.merges must be an array", t->name);
  size_t n = json_array_size(merges);
  uint32_t cap = 16;
  while (cap < 2 * n + 16) cap *= 2;
  t->merges.mask = cap - 1;
  t->merges.slot = calloc(cap, sizeof *t->merges.slot);
  char *buf = NULL;
  size_t buf_cap = 0;
  if (!t->merges.slot) return eng_err_set(e, ENG_ENOMEM, "%s: cannot allocate %zu merges", t->name, n);
  size_t i;
  const json_t *m;
  int rc = ENG_OK;
  json_array_foreach(merges, i, m) {
    // Two serialisations: "left right" (older files) and ["left", "right"].
    const char *a, *b;
    size_t la, lb;
    if (json_is_string(m)) {
      a = json_string_value(m);
      const char *sp = strchr(a, ' ');
      if (!sp || strchr(sp + 1, ' ')) {
        rc = eng_err_set(e, ENG_EINVAL, "%s: model.merges[%zu] is not two tokens split by one space", t->name, i);
        break;
      }
      la = (size_t)(sp - a), b = sp + 1, lb = strlen(b);
    } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
               json_is_string(json_array_get(m, 1))) {
      a = json_string_value(json_array_get(m, 0)), la = json_string_length(json_array_get(m, 0));
      b = json_string_value(json_array_get(m, 1)), lb = json_string_length(json_array_get(m, 1));
    } else {
      rc = eng_err_set(e, ENG_EINVAL, "%s: model.merges[%zu] is %s, not \"a b\" nor [\"a\", \"b\"]", t->name, i,
                       eng_json_kind(m));
      break;
    }
    if (la + lb > buf_cap) {
      buf_cap = 2 * (la + lb) + 64;
      char *nb = realloc(buf, buf_cap);
      if (!nb) {
        rc = eng_err_set(e, ENG_ENOMEM, "%s: cannot allocate a merge", t->name);
        break;
      }
      buf = nb;
    }
    memcpy(buf, a, la);
    memcpy(buf + la, b, lb);
    int32_t ia = tok_strmap_get(&t->vocab, a, la), ib = tok_strmap_get(&t->vocab, b, lb);
    int32_t im = tok_strmap_get(&t->vocab, buf, la + lb);
    if (ia < 0 || ib < 0 || im < 0) {
      rc = eng_err_set(e, ENG_EINVAL, "%s: model.merges[%zu] names a token that model.vocab does not have", t->name,
                       i);
      break;
    }
    merges_put(&t->merges, ia, ib, (uint32_t)i, im);
  }
  free(buf);
  return rc;
}

static int load_model(eng_tok *t, const json_t *m, eng_err *e) {
  const char *ty = type_of(m);
  if (!ty && json_is_object(m) && json_object_get(m, "merges")) ty = "BPE"; // older files omit it
  if (!ty || strcmp(ty, "BPE"))
    return eng_err_set(e, ENG_ENOTSUP, "%s: model: the %s model is not implemented (BPE is)", t->name,
                       ty ? ty : "untyped");
  const json_t *drop = json_object_get(m, "dropout");
  if (drop && !json_is_null(drop) && json_number_value(drop) != 0.0)
    return eng_err_set(e, ENG_ENOTSUP, "%s: model.dropout: BPE dropout is not implemented", t->name);
  static const char *const affix[] = {"continuing_subword_prefix", "end_of_word_suffix"};
  for (int i = 0; i < 2; i++) {
    const json_t *v = json_object_get(m, affix[i]);
    if (v && !json_is_null(v) && !(json_is_string(v) && json_string_length(v) == 0))
      return eng_err_set(e, ENG_ENOTSUP, "%s: model.%s is not implemented", t->name, affix[i]);
  }
  int fb = 0, rc;
  if ((rc = get_bool(t, m, "byte_fallback", "model", 0, &fb, e))) return rc;
  if (fb) return eng_err_set(e, ENG_ENOTSUP, "%s: model.byte_fallback (a SentencePiece-style BPE) is not implemented",
                             t->name);
  if ((rc = get_bool(t, m, "fuse_unk", "model", 0, &t->fuse_unk, e))) return rc;
  if ((rc = get_bool(t, m, "ignore_merges", "model", 0, &t->ignore_merges, e))) return rc;
  if ((rc = load_vocab(t, json_object_get(m, "vocab"), e))) return rc;
  if ((rc = load_merges(t, json_object_get(m, "merges"), e))) return rc;
  t->unk_id = -1;
  const json_t *unk = json_object_get(m, "unk_token");
  if (json_is_string(unk)) {
    t->unk_id = tok_strmap_get(&t->vocab, json_string_value(unk), json_string_length(unk));
    if (t->unk_id < 0) return eng_err_set(e, ENG_EINVAL, "%s: model.unk_token is not in model.vocab", t->name);
  }
  for (int b = 0; b < 256; b++) {
    char c[4];
    int n = tok_utf8_put(tok_byte_char((uint8_t)b), c);
    t->byte_id[b] = tok_strmap_get(&t->vocab, c, (size_t)n);
  }
  return ENG_OK;
}

static int added_cmp(const void *a, const void *b) {
  const tok_added *x = a, *y = b;
  return (x->id > y->id) - (x->id < y->id);
}

// Sorts the added tokens of each pass into buckets by first byte, longest
// first, so a scan tries only those that can start where it stands.
static int index_added(eng_tok *t, eng_err *e) {
  for (int p = 0; p < 2; p++) {
    t->bucket[p] = malloc(((size_t)t->n_added + 1) * sizeof *t->bucket[p]);
    if (!t->bucket[p]) return eng_err_set(e, ENG_ENOMEM, "%s: cannot allocate the added tokens", t->name);
    uint32_t k = 0;
    for (int c = 0; c < 256; c++) {
      t->first[p][c] = k;
      uint32_t from = k;
      for (int i = 0; i < t->n_added; i++) {
        const tok_added *x = &t->added[i];
        if (x->normalized == p && (unsigned char)x->match[0] == c) {
          // insertion by length, longest first
          uint32_t j = k++;
          while (j > from && t->added[t->bucket[p][j - 1]].match_len < x->match_len) {
            t->bucket[p][j] = t->bucket[p][j - 1];
            j--;
          }
          t->bucket[p][j] = (uint32_t)i;
        }
      }
    }
    t->first[p][256] = k;
  }
  return ENG_OK;
}

// The added tokens; normalized ones are matched in their normalized form,
// so this runs after the normalizers are loaded.
static int load_added(eng_tok *t, const json_t *list, eng_err *e) {
  if (!list || json_is_null(list)) return ENG_OK;
  if (!json_is_array(list)) return eng_err_set(e, ENG_EINVAL, "%s: added_tokens must be an array", t->name);
  t->added = calloc(json_array_size(list) + 1, sizeof *t->added);
  if (!t->added) return eng_err_set(e, ENG_ENOMEM, "%s: cannot allocate the added tokens", t->name);
  size_t i;
  const json_t *a;
  json_array_foreach(list, i, a) {
    char where[48];
    snprintf(where, sizeof where, "added_tokens[%zu]", i);
    const json_t *id = json_object_get(a, "id"), *content = json_object_get(a, "content");
    if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= INT32_MAX ||
        !json_is_string(content) || json_string_length(content) == 0)
      return eng_err_set(e, ENG_EINVAL, "%s: %s needs an integer \"id\" and a non-empty string \"content\"", t->name,
                         where);
    tok_added *x = &t->added[t->n_added++];
    x->id = (int32_t)json_integer_value(id);
    int rc;
    if ((rc = get_bool(t, a, "special", where, 0, &x->special, e)) ||
        (rc = get_bool(t, a, "lstrip", where, 0, &x->lstrip, e)) ||
        (rc = get_bool(t, a, "rstrip", where, 0, &x->rstrip, e)) ||
        (rc = get_bool(t, a, "single_word", where, 0, &x->single_word, e)) ||
        (rc = get_bool(t, a, "normalized", where, !x->special, &x->normalized, e)))
      return rc;
    x->content = strdup(json_string_value(content));
    if (!x->content) return eng_err_set(e, ENG_ENOMEM, "%s: cannot allocate the added tokens", t->name);
    const char *m = x->content;
    size_t mlen = strlen(m);
    tok_arena ar = {0};
    if (x->normalized && (rc = tok_normalize(t, &ar, x->content, strlen(x->content), &m, &mlen, e))) {
      tok_arena_free(&ar);
      return rc;
    }
    x->match = malloc(mlen + 1);
    if (x->match) memcpy(x->match, m, mlen), x->match[mlen] = '\0';
    x->match_len = mlen;
    tok_arena_free(&ar);
    if (!x->match) return eng_err_set(e, ENG_ENOMEM, "%s: cannot allocate the added tokens", t->name);
    if (x->id + 1 > t->vocab_size) t->vocab_size = x->id + 1;
    if (tok_strmap_put(&t->vocab, x->content, strlen(x->content), x->id))
      return eng_err_set(e, ENG_ENOMEM, "%s: cannot allocate the added tokens", t->name);
  }
  qsort(t->added, (size_t)t->n_added, sizeof *t->added, added_cmp);
  return index_added(t, e);
}

// id -> content for decoding: added tokens first (tokenizers asks the added
// vocabulary before the model).
static int index_ids(eng_tok *t, eng_err *e) {
  t->id_str = calloc((size_t)t->vocab_size + 1, sizeof *t->id_str);
  t->id_len = calloc((size_t)t->vocab_size + 1, sizeof *t->id_len);
  if (!t->id_str || !t->id_len) return eng_err_set(e, ENG_ENOMEM, "%s: cannot allocate the id table", t->name);
  for (uint32_t k = 0; k < t->vocab.n; k++) {
    int32_t id = t->vocab.val[k];
    if (!t->id_str[id]) t->id_str[id] = t->vocab.pool + t->vocab.koff[k], t->id_len[id] = t->vocab.klen[k];
  }
  // A normalized token is known by its normalized content (what
  // tokenizers' id_to_token and decode give back).
  for (int i = 0; i < t->n_added; i++) {
    t->id_str[t->added[i].id] = t->added[i].match;
    t->id_len[t->added[i].id] = (uint32_t)t->added[i].match_len;
  }
  return ENG_OK;
}

static int tok_build(eng_tok *t, const json_t *root, eng_err *e) {
  if (!json_is_object(root)) return eng_err_set(e, ENG_EINVAL, "%s: not a JSON object", t->name);
  int rc;
  if ((rc = load_normalizer(t, json_object_get(root, "normalizer"), "normalizer", e))) return rc;
  if ((rc = load_pre(t, json_object_get(root, "pre_tokenizer"), "pre_tokenizer", e))) return rc;
  int bytelevel = 0;
  for (int i = 0; i < t->n_pre; i++) bytelevel |= t->pre[i].kind == TOK_PRE_BYTELEVEL;
  if (!bytelevel)
    return eng_err_set(e, ENG_ENOTSUP,
                       "%s: pre_tokenizer: no ByteLevel step; only byte-level BPE tokenizers are implemented",
                       t->name);
  if ((rc = load_model(t, json_object_get(root, "model"), e))) return rc;
  if ((rc = load_added(t, json_object_get(root, "added_tokens"), e))) return rc;
  if ((rc = load_post(t, json_object_get(root, "post_processor"), "post_processor", e))) return rc;
  if ((rc = load_decoder(t, json_object_get(root, "decoder"), e))) return rc;
  return index_ids(t, e);
}

int eng_tok_parse(eng_tok **out, const char *json, size_t len, const char *name, eng_err *e) {
  *out = NULL;
  eng_tok *t = calloc(1, sizeof *t);
  if (!t || !(t->name = strdup(name))) {
    free(t);
    return eng_err_set(e, ENG_ENOMEM, "%s: cannot allocate the tokenizer", name);
  }
  t->hash = eng_fnv1a64(ENG_FNV1A64_INIT, json, len);
  json_error_t jerr;
  json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
  int rc = root ? tok_build(t, root, e)
                : eng_err_set(e, ENG_EINVAL, "%s: not valid JSON at line %d, column %d (byte %d): %s", name,
                              jerr.line, jerr.column, jerr.position, eng_json_fault(&jerr));
  json_decref(root);
  if (rc) {
    eng_tok_free(t);
    return rc;
  }
  *out = t;
  return ENG_OK;
}

int eng_tok_load(eng_tok **out, const eng_fs *fs, const char *path, eng_err *e) {
  *out = NULL;
  int fd;
  int rc = eng_fs_open(fs, path, &fd, e);
  if (rc) return rc;
  char *buf;
  size_t len;
  rc = eng_fs_read_all(fd, path, &buf, &len, e);
  close(fd);
  if (rc) return rc;
  rc = eng_tok_parse(out, buf, len, path, e);
  free(buf);
  return rc;
}

void eng_tok_free(eng_tok *t) {
  if (!t) return;
  for (int i = 0; i < t->n_pre; i++) pcre2_code_free(t->pre[i].re);
  for (int i = 0; i < t->n_added; i++) {
    free(t->added[i].content);
    free(t->added[i].match);
  }
  free(t->added);
  free(t->bucket[0]);
  free(t->bucket[1]);
  tok_strmap_free(&t->vocab);
  free(t->merges.slot);
  free(t->id_str);
  free(t->id_len);
  free(t->tmpl_pre);
  free(t->tmpl_post);
  free(t->name);
  free(t);
}

int32_t eng_tok_vocab(const eng_tok *t) { return t->vocab_size; }

int32_t eng_tok_id(const eng_tok *t, const char *content) {
  return tok_strmap_get(&t->vocab, content, strlen(content));
}

const char *eng_tok_added(const eng_tok *t, int32_t id) {
  int lo = 0, hi = t->n_added;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (t->added[mid].id < id) lo = mid + 1;
    else hi = mid;
  }
  return lo < t->n_added && t->added[lo].id == id ? t->added[lo].content : NULL;
}

uint64_t eng_tok_hash(const eng_tok *t) { return t->hash; }

void eng_tok_template(const eng_tok *t, const int32_t **pre, int *n_pre, const int32_t **post, int *n_post) {
  *pre = t->tmpl_pre;
  *n_pre = t->n_tmpl_pre;
  *post = t->tmpl_post;
  *n_post = t->n_tmpl_post;
}
