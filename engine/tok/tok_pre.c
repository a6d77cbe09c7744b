// Pre-tokenizers: Split (a regex or literal and a delimiter behaviour) and
// ByteLevel (a prefix space, GPT-2's regex), each cutting every piece that
// is not an added token into smaller ones, as tokenizers' PreTokenizedString
// does. Pieces of zero length are dropped.
#include <stdlib.h>
#include <string.h>

#include "tok/tok_impl.h"

// One segment of a piece: [start, end) and whether the pattern matched it
// (after Split's behaviour, whether to drop it).
typedef struct seg {
  size_t start, end;
  int flag;
} seg;

typedef struct segs {
  seg *v;
  size_t n, cap;
} segs;

static int segs_push(segs *s, size_t start, size_t end, int flag) {
  if (tok_grow((void **)&s->v, &s->cap, s->n + 1, sizeof *s->v)) return ENG_ENOMEM;
  s->v[s->n++] = (seg){start, end, flag};
  return ENG_OK;
}

// The matches of re in p[0..n) and the gaps between them, in order.
static int find_matches(eng_tok_enc *enc, const pcre2_code *re, const char *p, size_t n, segs *out, eng_err *e) {
  size_t prev = 0, at = 0;
  while (at <= n) {
    int rc = pcre2_match(re, (PCRE2_SPTR)p, n, at, PCRE2_NO_UTF_CHECK, enc->md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[160];
      pcre2_get_error_message(rc, msg, sizeof msg);
      return eng_err_set(e, ENG_EINVAL, "%s: pre-tokenizer regex: %s", enc->t->name, (char *)msg);
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(enc->md);
    size_t s = ov[0], t = ov[1];
    if (prev != s && segs_push(out, prev, s, 0)) return ENG_ENOMEM;
    if (segs_push(out, s, t, 1)) return ENG_ENOMEM;
    prev = t;
    if (t > s) {
      at = t;
    } else { // an empty match: step over one character
      if (t >= n) break;
      at = t + 1;
      while (at < n && ((unsigned char)p[at] & 0xC0) == 0x80) at++;
    }
  }
  if (prev != n && segs_push(out, prev, n, 0)) return ENG_ENOMEM;
  return ENG_OK;
}

// Applies Split's delimiter behaviour to the segments in place; afterwards
// flag means "drop" (only Removed drops).
static void apply_behavior(segs *s, enum tok_split_behavior b) {
  size_t w = 0;
  int prev_match = 0;
  switch (b) {
  case TOK_ISOLATED:
    for (size_t i = 0; i < s->n; i++) s->v[i].flag = 0;
    return;
  case TOK_REMOVED:
    return;
  case TOK_MERGED_PREV:
    for (size_t i = 0; i < s->n; i++) {
      seg g = s->v[i];
      if (g.flag && !prev_match && w > 0) s->v[w - 1].end = g.end;
      else s->v[w++] = (seg){g.start, g.end, 0};
      prev_match = g.flag;
    }
    break;
  case TOK_MERGED_NEXT:
    // From the end: a match joins the segment after it.
    for (size_t i = s->n; i-- > 0;) {
      seg g = s->v[i];
      if (g.flag && !prev_match && w > 0) s->v[s->n - w].start = g.start;
      else s->v[s->n - ++w] = (seg){g.start, g.end, 0};
      prev_match = g.flag;
    }
    memmove(s->v, s->v + s->n - w, w * sizeof *s->v);
    break;
  case TOK_CONTIGUOUS:
    for (size_t i = 0; i < s->n; i++) {
      seg g = s->v[i];
      if (g.flag == prev_match && w > 0) s->v[w - 1].end = g.end;
      else s->v[w++] = (seg){g.start, g.end, 0};
      prev_match = g.flag;
    }
    break;
  }
  s->n = w;
}

static int split_piece(eng_tok_enc *enc, const pcre2_code *re, enum tok_split_behavior b, int invert,
                       const tok_piece *pc, segs *sg, tok_pieces *out, eng_err *e) {
  sg->n = 0;
  int rc = find_matches(enc, re, pc->p, pc->len, sg, e);
  if (rc) return rc == ENG_ENOMEM ? eng_err_set(e, rc, "%s: cannot allocate pieces", enc->t->name) : rc;
  if (invert)
    for (size_t i = 0; i < sg->n; i++) sg->v[i].flag = !sg->v[i].flag;
  apply_behavior(sg, b);
  for (size_t i = 0; i < sg->n; i++) {
    const seg *g = &sg->v[i];
    if (g->flag || g->end == g->start) continue;
    if (tok_pieces_push(out, pc->p + g->start, g->end - g->start, pc->off + (uint32_t)g->start, -1))
      return eng_err_set(e, ENG_ENOMEM, "%s: cannot allocate pieces", enc->t->name);
    out->v[out->n - 1].lim = pc->lim;
  }
  return ENG_OK;
}

int tok_pre_run(eng_tok_enc *enc, const tok_pre *s, const tok_pieces *in, tok_pieces *out, eng_err *e) {
  segs sg = {0};
  int rc = ENG_OK;
  for (size_t i = 0; i < in->n && !rc; i++) {
    tok_piece pc = in->v[i];
    if (pc.added >= 0) {
      if (tok_pieces_push(out, pc.p, pc.len, pc.off, pc.added))
        rc = eng_err_set(e, ENG_ENOMEM, "%s: cannot allocate pieces", enc->t->name);
      continue;
    }
    if (s->kind == TOK_PRE_BYTELEVEL && s->add_prefix_space && (pc.len == 0 || pc.p[0] != ' ')) {
      char *p = tok_arena_alloc(&enc->arena, (size_t)pc.len + 1);
      if (!p) {
        rc = eng_err_set(e, ENG_ENOMEM, "%s: cannot allocate pieces", enc->t->name);
        break;
      }
      p[0] = ' ';
      memcpy(p + 1, pc.p, pc.len);
      pc.p = p;
      pc.len++;
    }
    if (!s->re) {
      if (pc.len && tok_pieces_push(out, pc.p, pc.len, pc.off, -1))
        rc = eng_err_set(e, ENG_ENOMEM, "%s: cannot allocate pieces", enc->t->name);
      else if (pc.len) out->v[out->n - 1].lim = pc.lim;
      continue;
    }
    enum tok_split_behavior b = s->kind == TOK_PRE_SPLIT ? s->behavior : TOK_ISOLATED;
    rc = split_piece(enc, s->re, b, s->kind == TOK_PRE_SPLIT && s->invert, &pc, &sg, out, e);
  }
  free(sg.v);
  return rc;
}
