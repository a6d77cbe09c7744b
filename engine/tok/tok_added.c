// Cutting added tokens out of text, as tokenizers' AddedVocabulary does:
// leftmost-longest, non-overlapping matches; a single_word token refused
// next to a word character (the refused match is still passed over);
// lstrip and rstrip take the white space beside a token into it.
#include <string.h>

#include "tok/tok_impl.h"

// The start of the run of white space that ends at s + n.
static size_t space_run_before(const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  while (n > 0) {
    size_t i = n - 1;
    while (i > 0 && (u[i] & 0xC0) == 0x80) i--;
    uint32_t cp;
    tok_utf8_next(u + i, &cp);
    if (!tok_is_space(cp)) break;
    n = i;
  }
  return n;
}

// The length of the run of white space at the start of s[0..n).
static size_t space_run_after(const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  size_t i = 0;
  while (i < n) {
    uint32_t cp;
    int k = tok_utf8_next(u + i, &cp);
    if (!tok_is_space(cp)) break;
    i += (size_t)k;
  }
  return i;
}

// The leftmost-longest match of pass p at or after *at: its added[] index, or
// -1 when none; *at is moved to its start.
static int find_next(const eng_tok *t, int p, const char *text, size_t n, size_t *at) {
  for (size_t i = *at; i < n; i++) {
    unsigned c = (unsigned char)text[i];
    for (uint32_t k = t->first[p][c]; k < t->first[p][c + 1]; k++) {
      const tok_added *x = &t->added[t->bucket[p][k]];
      if (x->match_len <= n - i && memcmp(text + i, x->match, x->match_len) == 0) {
        *at = i;
        return (int)t->bucket[p][k];
      }
    }
  }
  return -1;
}

int tok_added_split(const eng_tok *t, int p, const char *text, size_t n, uint32_t off, tok_pieces *out) {
  size_t start_offset = 0, at = 0;
  const unsigned char *u = (const unsigned char *)text;
  if (t->first[p][256]) {
    int k;
    while ((k = find_next(t, p, text, n, &at)) >= 0) {
      const tok_added *x = &t->added[k];
      size_t start = at, stop = at + x->match_len;
      at = stop;
      if (x->single_word) {
        int word_before = start > 0 && tok_is_word(tok_utf8_prev(u, start));
        uint32_t cp = 0;
        int word_after = stop < n && (tok_utf8_next(u + stop, &cp), tok_is_word(cp));
        if (word_before || word_after) continue;
      }
      if (x->lstrip) {
        size_t ns = space_run_before(text, start);
        start = ns > start_offset ? ns : start_offset;
      }
      if (x->rstrip) stop += space_run_after(text + stop, n - stop);
      if (start_offset < start && tok_pieces_push(out, text + start_offset, start - start_offset, off + (uint32_t)start_offset, -1))
        return ENG_ENOMEM;
      if (tok_pieces_push(out, text + start, stop - start, off + (uint32_t)start, x->id)) return ENG_ENOMEM;
      start_offset = stop;
    }
  }
  if (start_offset < n && tok_pieces_push(out, text + start_offset, n - start_offset, off + (uint32_t)start_offset, -1))
    return ENG_ENOMEM;
  return ENG_OK;
}
