// Text and chat data through a Hugging Face tokenizer (engine/tok): text
// documents into one token stream, chat records into masked records. Every
// record is checked here, before the first step; errors name the file, the
// line and the field.
#include <jansson.h>
#include <omp.h>
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
  for (int i = 0; i < n; i++)
    if (eng_tok_ids_push(v, ids[i], 0)) return ENG_ENOMEM;
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

// Calls fn on each non-blank line's JSON object with its 1-based number;
// buf[0..len) starts at line line0 + 1. scale: the progress callback's
// factor (the block's share of the file), 0 for none.
typedef int (*line_fn)(eng_data *d, const eng_data_opts *o, eng_tok_enc *enc, json_t *obj, unsigned long long line,
                       void *ctx, eng_err *e);

static int each_line(eng_data *d, const eng_data_opts *o, eng_tok_enc *enc, const char *buf, size_t len,
                     unsigned long long line0, int scale, line_fn fn, void *ctx, eng_err *e) {
  unsigned long long line = line0;
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
    if (scale && o->progress && (line & 1023) == 0)
      o->progress(o->progress_ctx, d->path, (uint64_t)(p - buf) * (uint64_t)scale, len * (uint64_t)scale);
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

// A JSONL file is cut into blocks of whole lines, one per thread, each
// tokenized into a data set of its own by its own encoder and then joined
// in order; the first error in the file (the first of the first block that
// has one) is the one reported.
typedef struct block {
  const char *p;
  size_t n;
  unsigned long long line0; // lines before the block
  eng_data part;            // its records (chat), path etc. shared with d
  eng_tok_ids out;          // its token stream (text)
  int rc;
  eng_err err;
} block;

typedef int (*block_fn)(eng_data *part, const eng_data_opts *o, block *b, int scale);

static int run_blocks(eng_data *d, const eng_data_opts *o, const char *buf, size_t len, block_fn fn, block **out,
                      int *nout, eng_err *e) {
  int k = len > (1u << 20) ? omp_get_max_threads() : 1;
  block *bs = calloc((size_t)k, sizeof *bs);
  if (!bs) return eng_err_set(e, ENG_ENOMEM, "%s: cannot allocate the tokenizing threads", d->path);
  size_t at = 0;
  unsigned long long line = 0;
  for (int i = 0; i < k; i++) {
    size_t end = i == k - 1 ? len : at + (len - at) / (size_t)(k - i);
    while (end < len && buf[end - 1] != '\n') end++;
    bs[i].p = buf + at;
    bs[i].n = end - at;
    bs[i].line0 = line;
    for (size_t j = at; j < end; j++) line += buf[j] == '\n';
    bs[i].part = (eng_data){.path = d->path, .seq_len = d->seq_len, .vocab = d->vocab, .fd = -1};
    at = end;
  }
#pragma omp parallel for schedule(static, 1) num_threads(k)
  for (int i = 0; i < k; i++) bs[i].rc = fn(&bs[i].part, o, &bs[i], i == 0 ? k : 0);
  *out = bs;
  *nout = k;
  for (int i = 0; i < k; i++)
    if (bs[i].rc) {
      *e = bs[i].err;
      return bs[i].rc;
    }
  return ENG_OK;
}

static void blocks_free(block *bs, int k) {
  for (int i = 0; bs && i < k; i++) {
    free(bs[i].part.rec_ids);
    free(bs[i].part.rec_labels);
    free(bs[i].part.rec_off);
    eng_tok_ids_free(&bs[i].out);
  }
  free(bs);
}

static int text_block(eng_data *part, const eng_data_opts *o, block *b, int scale) {
  eng_tok_enc *enc;
  int rc = eng_tok_enc_new(&enc, o->tok, &b->err);
  if (rc) return rc;
  rc = each_line(part, o, enc, b->p, b->n, b->line0, scale, text_line, &b->out, &b->err);
  eng_tok_enc_free(enc);
  return rc;
}

int eng_data_tok_text(eng_data *d, const eng_data_opts *o, const char *buf, size_t len, int jsonl, eng_err *e) {
  eng_tok_ids out = {0};
  int rc;
  if (jsonl) {
    block *bs = NULL;
    int k = 0;
    rc = run_blocks(d, o, buf, len, text_block, &bs, &k, e);
    for (int i = 0; !rc && i < k; i++)
      for (size_t j = 0; !rc && j < bs[i].out.n; j++)
        if (eng_tok_ids_push(&out, bs[i].out.ids[j], 0))
          rc = eng_err_set(e, ENG_ENOMEM, "%s: cannot grow the token stream", d->path);
    blocks_free(bs, k);
  } else {
    eng_tok_enc *enc;
    if ((rc = eng_tok_enc_new(&enc, o->tok, e))) return rc;
    doc_at where = {buf, 0};
    rc = text_doc(d, o, enc, buf, len, &where, &out, e);
    eng_tok_enc_free(enc);
  }
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

static int chat_block(eng_data *part, const eng_data_opts *o, block *b, int scale) {
  eng_tok_enc *enc;
  int rc = eng_tok_enc_new(&enc, o->tok, &b->err);
  if (rc) return rc;
  chat_ctx cx = {0};
  rc = each_line(part, o, enc, b->p, b->n, b->line0, scale, chat_line, &cx, &b->err);
  eng_tok_enc_free(enc);
  free(cx.msgs);
  eng_tok_ids_free(&cx.ids);
  free(cx.mask);
  free(cx.labels);
  return rc;
}

int eng_data_tok_chat(eng_data *d, const eng_data_opts *o, const char *buf, size_t len, eng_err *e) {
  block *bs = NULL;
  int k = 0;
  int rc = run_blocks(d, o, buf, len, chat_block, &bs, &k, e);
  uint64_t ntok = 0, ntrunc = 0;
  for (int i = 0; !rc && i < k; i++) {
    const eng_data *p = &bs[i].part;
    for (uint64_t r = 0; !rc && r < p->nrec; r++)
      rc = eng_data_rec_add(d, p->rec_ids + p->rec_off[r], p->rec_labels + p->rec_off[r],
                            p->rec_off[r + 1] - p->rec_off[r], e);
    ntok += p->ntok;
    ntrunc += p->ntrunc;
  }
  blocks_free(bs, k);
  if (rc) return rc;
  d->ntok = ntok; // the records' lengths before they were cut
  d->ntrunc = ntrunc;
  if (d->nrec == 0) return eng_err_set(e, ENG_EINVAL, "%s: no records, only blank lines", d->path);
  return ENG_OK;
}
