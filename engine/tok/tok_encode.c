// The encode pipeline (added tokens, normalizers, pre-tokenizers, BPE, the
// post-processor's template) and the ByteLevel decoder.
#include <stdlib.h>
#include <string.h>

#include "tok/tok_impl.h"

int eng_tok_enc_new(eng_tok_enc **out, const eng_tok *t, eng_err *e) {
  *out = NULL;
  eng_tok_enc *enc = calloc(1, sizeof *enc);
  if (!enc) return eng_err_set(e, ENG_ENOMEM, "%s: cannot allocate an encoder", t->name);
  enc->t = t;
  enc->md = pcre2_match_data_create(4, NULL);
  enc->cache = calloc(1u << 16, sizeof *enc->cache);
  enc->cache_mask = (1u << 16) - 1;
  if (!enc->md || !enc->cache) {
    eng_tok_enc_free(enc);
    return eng_err_set(e, ENG_ENOMEM, "%s: cannot allocate an encoder", t->name);
  }
  *out = enc;
  return ENG_OK;
}

void eng_tok_enc_free(eng_tok_enc *enc) {
  if (!enc) return;
  pcre2_match_data_free(enc->md);
  free(enc->a.v);
  free(enc->b.v);
  tok_arena_free(&enc->arena);
  free(enc->sym);
  free(enc->heap);
  free(enc->cache);
  free(enc->cache_keys);
  free(enc->cache_ids);
  free(enc->cache_lens);
  free(enc->mapped);
  free(enc);
}

// Pass 2 over the raw pass's pieces: each text piece normalized, then cut at
// the normalized added tokens, into out.
static int normalize_pieces(eng_tok_enc *enc, const tok_pieces *in, tok_pieces *out, eng_err *e) {
  const eng_tok *t = enc->t;
  for (size_t i = 0; i < in->n; i++) {
    const tok_piece *pc = &in->v[i];
    if (pc->added >= 0) {
      if (tok_pieces_push(out, pc->p, pc->len, pc->off, pc->added)) goto nomem;
      continue;
    }
    const char *np;
    size_t nlen;
    int rc = tok_normalize(t, &enc->arena, pc->p, pc->len, &np, &nlen, e);
    if (rc) return rc;
    size_t from = out->n;
    if (tok_added_split(t, 1, np, nlen, pc->off, out)) goto nomem;
    if (np != pc->p && pc->len)
      for (size_t k = from; k < out->n; k++) out->v[k].lim = pc->off + pc->len - 1;
  }
  return ENG_OK;
nomem:
  return eng_err_set(e, ENG_ENOMEM, "%s: cannot allocate pieces", t->name);
}

int eng_tok_encode(eng_tok_enc *enc, const char *text, size_t n, int add_special, eng_tok_ids *out, eng_err *e) {
  const eng_tok *t = enc->t;
  if (n > UINT32_MAX - 1)
    return eng_err_set(e, ENG_EINVAL, "%s: %zu bytes of text in one piece, more than 4 GiB", t->name, n);
  size_t valid = eng_tok_utf8_valid(text, n);
  if (valid < n) return eng_err_set(e, ENG_EINVAL, "invalid UTF-8 at byte %zu", valid);
  tok_arena_reset(&enc->arena);
  tok_pieces *cur = &enc->a, *next = &enc->b;
  cur->n = next->n = 0;
  int rc;
  if (add_special)
    for (int i = 0; i < t->n_tmpl_pre; i++)
      if (eng_tok_ids_push(out, t->tmpl_pre[i], 0)) goto nomem;
  if (tok_added_split(t, 0, text, n, 0, next)) goto nomem;
  if ((rc = normalize_pieces(enc, next, cur, e))) return rc;
  for (int s = 0; s < t->n_pre; s++) {
    next->n = 0;
    if ((rc = tok_pre_run(enc, &t->pre[s], cur, next, e))) return rc;
    tok_pieces *x = cur;
    cur = next;
    next = x;
  }
  for (size_t i = 0; i < cur->n; i++) {
    const tok_piece *pc = &cur->v[i];
    if (pc->added >= 0) {
      if (eng_tok_ids_push(out, pc->added, pc->off)) goto nomem;
      continue;
    }
    if (!pc->len) continue;
    size_t from = out->n;
    if ((rc = tok_bpe(enc, pc, out, e))) return rc;
    for (size_t k = from; k < out->n; k++)
      if (out->off[k] > pc->lim) out->off[k] = pc->lim;
  }
  if (add_special)
    for (int i = 0; i < t->n_tmpl_post; i++)
      if (eng_tok_ids_push(out, t->tmpl_post[i], (uint32_t)n)) goto nomem;
  return ENG_OK;
nomem:
  return eng_err_set(e, ENG_ENOMEM, "%s: out of memory encoding %zu bytes", t->name, n);
}

// tokenizers' is_special_token goes by content: any token whose text is a
// special added token's is left out with skip_special.
static int is_special(const eng_tok *t, int32_t id) {
  const char *s = t->id_str[id];
  for (int i = 0; i < t->n_added; i++)
    if (t->added[i].special && !strcmp(t->added[i].content, s)) return 1;
  return 0;
}

int eng_tok_decode(const eng_tok *t, const int32_t *ids, size_t n, int skip_special, char **text, size_t *len,
                   eng_err *e) {
  size_t cap = 1;
  for (size_t i = 0; i < n; i++)
    if (ids[i] >= 0 && ids[i] < t->vocab_size && t->id_str[ids[i]]) cap += t->id_len[ids[i]];
  char *raw = malloc(cap);
  if (!raw) return eng_err_set(e, ENG_ENOMEM, "%s: cannot allocate %zu bytes to decode", t->name, cap);
  size_t w = 0;
  for (size_t i = 0; i < n; i++) {
    if (ids[i] < 0 || ids[i] >= t->vocab_size || !t->id_str[ids[i]]) continue;
    if (skip_special && is_special(t, ids[i])) continue;
    // ByteLevel: every character maps back to its byte, or, when one of them
    // does not, the token's text is kept as it is.
    const unsigned char *s = (const unsigned char *)t->id_str[ids[i]];
    size_t sl = t->id_len[ids[i]], j = 0, w0 = w;
    int mapped = 1;
    while (j < sl && mapped) {
      uint32_t cp;
      j += (size_t)tok_utf8_next(s + j, &cp);
      int b = tok_char_byte(cp);
      if (b < 0) mapped = 0;
      else raw[w++] = (char)b;
    }
    if (!mapped) {
      memcpy(raw + w0, s, sl);
      w = w0 + sl;
    }
  }
  int rc = eng_tok_utf8_repair(raw, w, text, len, e);
  free(raw);
  return rc;
}
