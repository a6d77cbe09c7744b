// The chat template renderers and their recognition (chat.h).
#define _POSIX_C_SOURCE 200809L // strdup, strndup under -std=c17

#include "tok/chat.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/json_file.h"
#include "tok/tok_impl.h"

const char *eng_chat_name(eng_chat_kind k) {
  return k == ENG_CHAT_CHATML ? "chatml" : k == ENG_CHAT_LLAMA3 ? "llama3" : "none";
}

int eng_chat_role_ok(const char *role) {
  return !strcmp(role, "system") || !strcmp(role, "user") || !strcmp(role, "assistant");
}

void eng_chat_free(eng_chat *c) {
  free(c->why);
  free(c->default_system);
  free(c->bos);
  free(c->eos);
  memset(c, 0, sizeof *c);
}

// The literal default system prompt of a ChatML template: the text of a
// quoted '<|im_start|>system\n...<|im_end|>' with nothing computed inside,
// Jinja's string escapes undone. NULL when there is none.
static char *chatml_default_system(const char *tmpl) {
  static const char head[] = "<|im_start|>system\\n";
  for (const char *p = strstr(tmpl, head); p; p = strstr(p + 1, head)) {
    const char *s = p + sizeof head - 1, *end = strstr(s, "<|im_end|>");
    if (!end || end == s) continue;
    char q = p > tmpl ? p[-1] : 0;
    if (q != '\'' && q != '"') continue;
    char *out = malloc((size_t)(end - s) + 1), *w = out;
    if (!out) return NULL;
    int literal = 1;
    for (const char *r = s; r < end && literal; r++) {
      if (*r == q) literal = 0; // the string ends before <|im_end|>: computed
      else if (*r == '\\' && r + 1 < end) {
        r++;
        *w++ = *r == 'n' ? '\n' : *r == 't' ? '\t' : *r;
      } else *w++ = *r;
    }
    *w = '\0';
    if (literal) return out;
    free(out);
  }
  return NULL;
}

static int set_why(eng_chat *c, const char *why, eng_err *e) {
  c->kind = ENG_CHAT_NONE;
  free(c->why);
  c->why = strdup(why);
  return c->why ? ENG_OK : eng_err_set(e, ENG_ENOMEM, "cannot allocate the chat template");
}

int eng_chat_from_template(eng_chat *c, const char *tmpl, const char *force, const char *bos, const char *eos,
                           eng_err *e) {
  memset(c, 0, sizeof *c);
  if ((bos && !(c->bos = strdup(bos))) || (eos && !(c->eos = strdup(eos)))) {
    eng_chat_free(c);
    return eng_err_set(e, ENG_ENOMEM, "cannot allocate the chat template");
  }
  if (force && *force) {
    if (!strcmp(force, "chatml")) c->kind = ENG_CHAT_CHATML;
    else if (!strcmp(force, "llama3")) c->kind = ENG_CHAT_LLAMA3;
    else {
      eng_chat_free(c);
      return eng_err_set(e, ENG_EINVAL, "chat_template \"%s\" is not one of chatml, llama3", force);
    }
    if (c->kind == ENG_CHAT_CHATML && tmpl) c->default_system = chatml_default_system(tmpl);
    return ENG_OK;
  }
  if (!tmpl) return ENG_OK;
  if (strstr(tmpl, "<|im_start|>") && strstr(tmpl, "<|im_end|>")) {
    if (strstr(tmpl, "<think>") || strstr(tmpl, "reasoning_content"))
      return set_why(c, "a Qwen3/Qwen3.5-style ChatML template with thinking blocks, which the built-in ChatML renderer "
                        "does not reproduce (chat_template: chatml renders plain ChatML)",
                     e);
    c->kind = ENG_CHAT_CHATML;
    c->default_system = chatml_default_system(tmpl);
    return ENG_OK;
  }
  if (strstr(tmpl, "<|start_header_id|>") && strstr(tmpl, "<|eot_id|>")) {
    if (strstr(tmpl, "Cutting Knowledge Date"))
      return set_why(c, "a Llama-3.1-style template with a date header, which the built-in Llama-3 renderer does not "
                        "reproduce (chat_template: llama3 renders the Llama-3.0 form)",
                     e);
    if (!strstr(tmpl, "trim"))
      return set_why(c, "a Llama-3-like template that does not trim message contents as Llama-3's does", e);
    c->kind = ENG_CHAT_LLAMA3;
    return ENG_OK;
  }
  return set_why(c, "neither ChatML (<|im_start|>, <|im_end|>) nor Llama-3 (<|start_header_id|>, <|eot_id|>)", e);
}

// A token name of tokenizer_config.json: a string or an AddedToken object.
static const char *token_name(const json_t *v) {
  if (json_is_object(v)) v = json_object_get(v, "content");
  return json_is_string(v) ? json_string_value(v) : NULL;
}

int eng_chat_load(eng_chat *c, const eng_fs *fs, const char *dir, const char *force, eng_err *e) {
  memset(c, 0, sizeof *c);
  char path[4096];
  snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
  int fd;
  int rc = eng_fs_open_opt(fs, path, &fd, e);
  if (rc < 0) return rc;
  json_t *root = NULL;
  if (rc == 0) {
    // Read with big integers as reals: transformers writes model_max_length
    // as int(1e30), past any int64.
    char *buf;
    size_t len;
    rc = eng_fs_read_all(fd, path, &buf, &len, e);
    close(fd);
    if (rc) return rc;
    json_error_t jerr;
    root = json_loadb(buf, len, JSON_DECODE_INT_AS_REAL | JSON_REJECT_DUPLICATES, &jerr);
    free(buf);
    if (!root)
      return eng_err_set(e, ENG_EINVAL, "%s: not valid JSON at line %d, column %d (byte %d): %s", path, jerr.line,
                         jerr.column, jerr.position, eng_json_fault(&jerr));
  }
  const char *tmpl = NULL;
  const json_t *t = root ? json_object_get(root, "chat_template") : NULL;
  if (json_is_string(t)) tmpl = json_string_value(t);
  size_t i;
  const json_t *item;
  if (json_is_array(t))
    json_array_foreach(t, i, item) {
      const char *name = json_string_value(json_object_get(item, "name"));
      if (name && !strcmp(name, "default")) tmpl = json_string_value(json_object_get(item, "template"));
    }
  char *jinja = NULL;
  if (!tmpl) {
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    rc = eng_fs_open_opt(fs, path, &fd, e);
    if (rc < 0) {
      json_decref(root);
      return rc;
    }
    if (rc == 0) {
      size_t len;
      rc = eng_fs_read_all(fd, path, &jinja, &len, e);
      close(fd);
      if (rc) {
        json_decref(root);
        return rc;
      }
      tmpl = jinja;
    }
  }
  rc = eng_chat_from_template(c, tmpl, force, root ? token_name(json_object_get(root, "bos_token")) : NULL,
                              root ? token_name(json_object_get(root, "eos_token")) : NULL, e);
  free(jinja);
  json_decref(root);
  return rc;
}

// Python's str.isspace, what Jinja's trim strips.
static int py_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

static void py_strip(const char **s, size_t *n) {
  const unsigned char *u = (const unsigned char *)*s;
  size_t a = 0, b = *n;
  while (a < b) {
    uint32_t cp;
    int k = tok_utf8_next(u + a, &cp);
    if (!py_space(cp)) break;
    a += (size_t)k;
  }
  while (b > a) {
    uint32_t cp = tok_utf8_prev(u, b);
    if (!py_space(cp)) break;
    size_t i = b - 1;
    while (i > a && (u[i] & 0xC0) == 0x80) i--;
    b = i;
  }
  *s += a;
  *n = b - a;
}

typedef struct buf {
  char *p;
  size_t n, cap;
} buf;

static int put(buf *b, const char *s, size_t n) {
  if (tok_grow((void **)&b->p, &b->cap, b->n + n + 1, 1)) return ENG_ENOMEM;
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = '\0';
  return ENG_OK;
}

static int puts_(buf *b, const char *s) { return put(b, s, strlen(s)); }

// Renders into b; spans[2k], spans[2k+1] bound the masked bytes. The message
// contents go through the tokenizer's normalizers first, so that the
// rendered text is in normal form and the token offsets fall on it (the
// template's own text is ASCII and normal already).
static int render(const eng_chat *c, const eng_tok *t, tok_arena *ar, const eng_chat_msg *m, int n, int mask_from,
                  int gen_prompt, buf *b, size_t *spans, int *n_spans, eng_err *e) {
  int rc = 0;
  *n_spans = 0;
  if (c->kind == ENG_CHAT_CHATML && c->default_system && (n == 0 || strcmp(m[0].role, "system")))
    rc |= puts_(b, "<|im_start|>system\n") | puts_(b, c->default_system) | puts_(b, "<|im_end|>\n");
  if (c->kind == ENG_CHAT_LLAMA3 && n > 0 && c->bos) rc |= puts_(b, c->bos);
  for (int i = 0; i < n && !rc; i++) {
    if (!eng_chat_role_ok(m[i].role))
      return eng_err_set(e, ENG_EINVAL, "message %d: role \"%.32s\" is not system, user or assistant", i,
                         m[i].role);
    const char *s = m[i].content;
    size_t len = m[i].len;
    if (c->kind == ENG_CHAT_LLAMA3) py_strip(&s, &len);
    int r = tok_normalize(t, ar, s, len, &s, &len, e);
    if (r) return r;
    int masked = i >= mask_from && !strcmp(m[i].role, "assistant");
    if (c->kind == ENG_CHAT_CHATML) {
      rc |= puts_(b, "<|im_start|>") | puts_(b, m[i].role) | puts_(b, "\n");
      if (masked) spans[(*n_spans)++] = b->n;
      rc |= put(b, s, len) | puts_(b, "<|im_end|>");
      if (masked) spans[(*n_spans)++] = b->n;
      rc |= puts_(b, "\n");
    } else {
      rc |= puts_(b, "<|start_header_id|>") | puts_(b, m[i].role) | puts_(b, "<|end_header_id|>\n\n");
      if (masked) spans[(*n_spans)++] = b->n;
      rc |= put(b, s, len) | puts_(b, "<|eot_id|>");
      if (masked) spans[(*n_spans)++] = b->n;
    }
  }
  if (gen_prompt)
    rc |= puts_(b, c->kind == ENG_CHAT_CHATML ? "<|im_start|>assistant\n"
                                              : "<|start_header_id|>assistant<|end_header_id|>\n\n");
  return rc ? eng_err_set(e, ENG_ENOMEM, "cannot allocate a rendered conversation") : ENG_OK;
}

int eng_chat_encode(const eng_chat *c, eng_tok_enc *enc, const eng_chat_msg *msgs, int n, int mask_from,
                    int gen_prompt, eng_tok_ids *out, uint8_t **mask, size_t *mask_cap, eng_err *e) {
  if (c->kind == ENG_CHAT_NONE)
    return eng_err_set(e, ENG_EINVAL, "the model's chat template is not recognised: %s",
                       c->why ? c->why : "the model directory has none");
  for (int i = 0; i < n; i++) {
    size_t v = eng_tok_utf8_valid(msgs[i].content, msgs[i].len);
    if (v < msgs[i].len) return eng_err_set(e, ENG_EINVAL, "message %d: content: invalid UTF-8 at byte %zu", i, v);
  }
  buf b = {0};
  tok_arena ar = {0};
  size_t *spans = malloc((2 * (size_t)n + 1) * sizeof *spans);
  int n_spans = 0;
  int rc = spans ? render(c, enc->t, &ar, msgs, n, mask_from, gen_prompt, &b, spans, &n_spans, e)
                 : eng_err_set(e, ENG_ENOMEM, "cannot allocate a rendered conversation");
  size_t from = out->n;
  if (!rc) rc = eng_tok_encode(enc, b.p ? b.p : "", b.n, 0, out, e);
  if (!rc && tok_grow((void **)mask, mask_cap, out->cap, 1))
    rc = eng_err_set(e, ENG_ENOMEM, "cannot allocate an assistant mask");
  if (!rc) {
    // As transformers: from the token holding a span's first byte through
    // the one holding its last.
    for (size_t k = from; k < out->n; k++) (*mask)[k] = 0;
    size_t k = from;
    for (int s = 0; s < n_spans; s += 2) {
      size_t lo = spans[s], hi = spans[s + 1];
      if (hi <= lo) continue;
      while (k + 1 < out->n && out->off[k + 1] <= lo) k++;
      for (size_t j = k; j < out->n && out->off[j] < hi; j++) (*mask)[j] = 1;
    }
  }
  free(spans);
  free(b.p);
  tok_arena_free(&ar);
  return rc;
}
