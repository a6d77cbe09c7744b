// Text and chat data through a Hugging Face tokenizer (engine/tok): text
// documents into one token stream, chat records into masked records. Every
// record is checked here, before the first step; errors name the file, the
// line and the field.
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "common/json_file.h"
#include "common/json_kind.h"
#include "data/data_impl.h"
#include "tok/chat.h"
#include "tok/tok.h"

enum { CHUNK = 1 << 20 }; // bytes of a plain text file encoded at a time

static unsigned long long line_of(const char *buf, size_t off) {
  unsigned long long line = 1;
  for (size_t i = 0; i < off; i++) line += buf[i] == '\n';
  return line;
}

// Every id below the model's vocabulary (a tokenizer may have more tokens
// than the embedding has rows).
static int check_vocab(const eng_data *d, const int32_t *ids, size_t n, unsigned long long line, eng_err *e) {
  for (size_t i = 0; i < n; i++)
    if (ids[i] >= d->vocab)
      return eng_err_set(e, ENG_EINVAL, "%s: line %llu: the tokenizer gives token id %d, past the model's vocab %d",
                         d->path, line, ids[i], d->vocab);
  return ENG_OK;
}

// The end of the chunk that starts at from: a newline followed by an ASCII
// letter or digit, where every pre-tokenizer regex of these tokenizers
// starts a new piece, so that encoding chunk by chunk gives the ids of the
// whole.
static size_t chunk_end(const char *buf, size_t len, size_t from) {
  if (len - from <= CHUNK) return len;
  for (size_t i = from + CHUNK; i + 1 < len; i++)
    if (buf[i] == '\n' && ((buf[i + 1] >= 'a' && buf[i + 1] <= 'z') || (buf[i + 1] >= 'A' && buf[i + 1] <= 'Z') ||
                           (buf[i + 1] >= '0' && buf[i + 1] <= '9')))
      return i + 1;
  return len;
}

static int push_ids(eng_tok_ids *v, const int32_t *ids, int n) {
  for (int i = 0; i < n; i++) {
    if (v->n == v->cap) {
      size_t cap = v->cap ? 2 * v->cap : 4096;
      int32_t *p = realloc(v->ids, cap * sizeof *p);
      if (!p) return ENG_ENOMEM;
      v->ids = p;
      uint32_t *o = realloc(v->off, cap * sizeof *o);
      if (!o) return ENG_ENOMEM;
      v->off = o;
      v->cap = cap;
    }
    v->off[v->n] = 0;
    v->ids[v->n++] = ids[i];
  }
  return ENG_OK;
}

// Where a document is: a plain text file (buf, the whole file: lines are
// counted in it) or one JSONL line.
typedef struct doc_at {
  const char *buf;
  unsigned long long line;
} doc_at;

static unsigned long long doc_line(const doc_at *at, size_t off) { return at->buf ? line_of(at->buf, off) : at->line; }

// One document: the template around its ids, then the EOS.
static int text_doc(eng_data *d, const eng_data_opts *o, eng_tok_enc *enc, const char *s, size_t n,
                    const doc_at *where, eng_tok_ids *out, eng_err *e) {
  const int32_t *pre, *post;
  int npre, npost;
  eng_tok_template(o->tok, &pre, &npre, &post, &npost);
  size_t first = out->n;
  if (push_ids(out, pre, npre)) goto nomem;
  for (size_t at = 0; at < n;) {
    size_t end = chunk_end(s, n, at), from = out->n;
    size_t bad = at + eng_tok_utf8_valid(s + at, end - at);
    if (bad < end)
      return eng_err_set(e, ENG_EINVAL, "%s: line %llu: invalid UTF-8 at byte %zu%s", d->path, doc_line(where, bad),
                         bad, where->buf ? " of the file" : " of \"text\"");
    int rc = eng_tok_encode(enc, s + at, end - at, 0, out, e);
    if (rc) return eng_err_prefix(e, "%s: line %llu: ", d->path, doc_line(where, at));
    if ((rc = check_vocab(d, out->ids + from, out->n - from, doc_line(where, at), e))) return rc;
    at = end;
    if (o->progress && where->buf) o->progress(o->progress_ctx, d->path, at, n);
  }
  if (push_ids(out, post, npost)) goto nomem;
  if (o->eos >= 0 && push_ids(out, &o->eos, 1)) goto nomem;
  // the template's and the EOS's ids too: a tokenizer_config may name any
  return check_vocab(d, out->ids + first, (size_t)npre, doc_line(where, 0), e) ||
                 check_vocab(d, out->ids + out->n - (size_t)npost - (o->eos >= 0), (size_t)npost + (o->eos >= 0),
                             doc_line(where, n), e)
             ? ENG_EINVAL
             : ENG_OK;
nomem:
  return eng_err_set(e, ENG_ENOMEM, "%s: cannot grow the token stream", d->path);
}

// Calls fn on each non-blank line's JSON object with its 1-based number.
typedef int (*line_fn)(eng_data *d, const eng_data_opts *o, eng_tok_enc *enc, json_t *obj, unsigned long long line,
                       void *ctx, eng_err *e);

static int each_line(eng_data *d, const eng_data_opts *o, eng_tok_enc *enc, const char *buf, size_t len, line_fn fn,
                     void *ctx, eng_err *e) {
  unsigned long long line = 0;
  for (const char *p = buf, *end = buf + len; p < end;) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
    const char *s = p;
    p += n + 1;
    line++;
    size_t k = 0;
    while (k < n && (s[k] == ' ' || s[k] == '\t' || s[k] == '\r')) k++;
    if (k == n) continue;
    json_error_t jerr;
    json_t *obj = json_loadb(s, n, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
    if (!obj)
      return eng_err_set(e, ENG_EINVAL, "%s: line %llu: not valid JSON at column %d: %s", d->path, line,
                         jerr.column, eng_json_fault(&jerr));
    int rc = json_is_object(obj) ? fn(d, o, enc, obj, line, ctx, e)
                                 : eng_err_set(e, ENG_EINVAL, "%s: line %llu: not a JSON object", d->path, line);
    json_decref(obj);
    if (rc) return rc;
    if (o->progress && (line & 1023) == 0) o->progress(o->progress_ctx, d->path, (uint64_t)(p - buf), len);
  }
  return ENG_OK;
}

static int text_line(eng_data *d, const eng_data_opts *o, eng_tok_enc *enc, json_t *obj, unsigned long long line,
                     void *ctx, eng_err *e) {
  json_t *t = json_object_get(obj, "text");
  if (!t) return eng_err_set(e, ENG_EINVAL, "%s: line %llu: field \"text\" is missing", d->path, line);
  if (!json_is_string(t))
    return eng_err_set(e, ENG_EINVAL, "%s: line %llu: field \"text\" is %s, not a string", d->path, line,
                       eng_json_kind(t));
  doc_at where = {NULL, line};
  return text_doc(d, o, enc, json_string_value(t), json_string_length(t), &where, ctx, e);
}

int eng_data_tok_text(eng_data *d, const eng_data_opts *o, const char *buf, size_t len, int jsonl, eng_err *e) {
  eng_tok_enc *enc;
  int rc = eng_tok_enc_new(&enc, o->tok, e);
  if (rc) return rc;
  eng_tok_ids out = {0};
  doc_at where = {buf, 0};
  rc = jsonl ? each_line(d, o, enc, buf, len, text_line, &out, e) : text_doc(d, o, enc, buf, len, &where, &out, e);
  eng_tok_enc_free(enc);
  if (!rc && out.n == 0) rc = eng_err_set(e, ENG_EINVAL, "%s: no documents, only blank lines", d->path);
  free(out.off);
  if (rc) {
    free(out.ids);
    return rc;
  }
  d->text_ids = out.ids;
  d->ntok = out.n;
  return ENG_OK;
}

// Chat records: the scratch of one encoder.
typedef struct chat_ctx {
  eng_chat_msg *msgs;
  int cap;
  eng_tok_ids ids;
  uint8_t *mask;
  size_t mask_cap;
  int32_t *labels;
  size_t labels_cap;
} chat_ctx;

// Appends the messages of list (a JSON array) to cx->msgs; field names it.
static int chat_msgs(eng_data *d, unsigned long long line, const char *field, json_t *list, chat_ctx *cx, int *n,
                     eng_err *e) {
  if (!json_is_array(list))
    return eng_err_set(e, ENG_EINVAL, "%s: line %llu: field \"%s\" is %s, not an array of messages", d->path, line,
                       field, eng_json_kind(list));
  size_t i;
  json_t *m;
  json_array_foreach(list, i, m) {
    if (*n == cx->cap) {
      int cap = cx->cap ? 2 * cx->cap : 16;
      eng_chat_msg *v = realloc(cx->msgs, (size_t)cap * sizeof *v);
      if (!v) return eng_err_set(e, ENG_ENOMEM, "%s: line %llu: cannot allocate the messages", d->path, line);
      cx->msgs = v;
      cx->cap = cap;
    }
    if (!json_is_object(m))
      return eng_err_set(e, ENG_EINVAL, "%s: line %llu: %s[%zu] is %s, not a message object", d->path, line, field,
                         i, eng_json_kind(m));
    json_t *role = json_object_get(m, "role"), *content = json_object_get(m, "content");
    if (!role || !content)
      return eng_err_set(e, ENG_EINVAL, "%s: line %llu: %s[%zu]: field \"%s\" is missing", d->path, line, field, i,
                         role ? "content" : "role");
    if (!json_is_string(role) || !json_is_string(content))
      return eng_err_set(e, ENG_EINVAL, "%s: line %llu: %s[%zu]: field \"%s\" is %s, not a string", d->path, line,
                         field, i, json_is_string(role) ? "content" : "role",
                         eng_json_kind(json_is_string(role) ? content : role));
    if (!eng_chat_role_ok(json_string_value(role)))
      return eng_err_set(e, ENG_EINVAL, "%s: line %llu: %s[%zu]: unknown role \"%.32s\" (system, user or assistant)",
                         d->path, line, field, i, json_string_value(role));
    cx->msgs[(*n)++] = (eng_chat_msg){json_string_value(role), json_string_value(content), json_string_length(content)};
  }
  return ENG_OK;
}

// A string prompt and completion: the prompt with the template, then the
// completion and the EOS, counted.
static int chat_pair(eng_data *d, const eng_data_opts *o, eng_tok_enc *enc, json_t *p, json_t *c,
                     unsigned long long line, chat_ctx *cx, eng_err *e) {
  int rc = eng_tok_encode(enc, json_string_value(p), json_string_length(p), 1, &cx->ids, e);
  size_t np = cx->ids.n;
  if (!rc) rc = eng_tok_encode(enc, json_string_value(c), json_string_length(c), 0, &cx->ids, e);
  if (rc) return eng_err_prefix(e, "%s: line %llu: ", d->path, line);
  if (o->eos >= 0 && push_ids(&cx->ids, &o->eos, 1))
    return eng_err_set(e, ENG_ENOMEM, "%s: line %llu: out of memory", d->path, line);
  if (cx->mask_cap < cx->ids.n) {
    uint8_t *m = realloc(cx->mask, cx->ids.cap);
    if (!m) return eng_err_set(e, ENG_ENOMEM, "%s: line %llu: out of memory", d->path, line);
    cx->mask = m;
    cx->mask_cap = cx->ids.cap;
  }
  for (size_t k = 0; k < cx->ids.n; k++) cx->mask[k] = k >= np;
  return ENG_OK;
}

static int chat_line(eng_data *d, const eng_data_opts *o, eng_tok_enc *enc, json_t *obj, unsigned long long line,
                     void *ctx, eng_err *e) {
  chat_ctx *cx = ctx;
  cx->ids.n = 0;
  json_t *msgs = json_object_get(obj, "messages"), *p = json_object_get(obj, "prompt"),
         *c = json_object_get(obj, "completion");
  int rc, n = 0, mask_from = 0;
  if (msgs) {
    rc = chat_msgs(d, line, "messages", msgs, cx, &n, e);
  } else if (!p || !c) {
    return eng_err_set(e, ENG_EINVAL, "%s: line %llu: field \"%s\" is missing (a chat record holds \"messages\", or "
                       "\"prompt\" and \"completion\")",
                       d->path, line, p ? "completion" : c ? "prompt" : "messages");
  } else if (json_is_string(p) && json_is_string(c)) {
    if ((rc = chat_pair(d, o, enc, p, c, line, cx, e))) return rc;
    goto labels;
  } else {
    rc = chat_msgs(d, line, "prompt", p, cx, &n, e);
    mask_from = n;
    if (!rc) rc = chat_msgs(d, line, "completion", c, cx, &n, e);
  }
  if (rc) return rc;
  if (!o->chat)
    return eng_err_set(e, ENG_EINVAL, "%s: line %llu: chat records need the model's chat template "
                       "(tokenizer_config.json), which is not there", d->path, line);
  int assistant = 0;
  for (int i = mask_from; i < n; i++) assistant |= !strcmp(cx->msgs[i].role, "assistant");
  if (!assistant)
    return eng_err_set(e, ENG_EINVAL, "%s: line %llu: no assistant message%s: nothing would count in the loss",
                       d->path, line, mask_from ? " in \"completion\"" : "");
  if ((rc = eng_chat_encode(o->chat, enc, cx->msgs, n, mask_from, 0, &cx->ids, &cx->mask, &cx->mask_cap, e)))
    return eng_err_prefix(e, "%s: line %llu: ", d->path, line);
labels:
  if ((rc = check_vocab(d, cx->ids.ids, cx->ids.n, line, e))) return rc;
  if (cx->labels_cap < cx->ids.n) {
    int32_t *l = realloc(cx->labels, cx->ids.cap * sizeof *l);
    if (!l) return eng_err_set(e, ENG_ENOMEM, "%s: line %llu: out of memory", d->path, line);
    cx->labels = l;
    cx->labels_cap = cx->ids.cap;
  }
  for (size_t k = 0; k < cx->ids.n; k++) cx->labels[k] = cx->mask[k] ? cx->ids.ids[k] : ENG_DATA_IGNORE;
  return eng_data_rec_add(d, cx->ids.ids, cx->labels, cx->ids.n, e);
}

int eng_data_tok_chat(eng_data *d, const eng_data_opts *o, const char *buf, size_t len, eng_err *e) {
  eng_tok_enc *enc;
  int rc = eng_tok_enc_new(&enc, o->tok, e);
  if (rc) return rc;
  chat_ctx cx = {0};
  rc = each_line(d, o, enc, buf, len, chat_line, &cx, e);
  eng_tok_enc_free(enc);
  if (!rc && d->nrec == 0) rc = eng_err_set(e, ENG_EINVAL, "%s: no records, only blank lines", d->path);
  free(cx.msgs);
  eng_tok_ids_free(&cx.ids);
  free(cx.mask);
  free(cx.labels);
  return rc;
}
