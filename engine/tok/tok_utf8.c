// UTF-8 and the few Unicode properties the tokenizer needs beyond
// normalization: validation, lossy repair, the ByteLevel byte map, and the
// white-space and word-character tests of added tokens.
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tok/tok_impl.h"

int tok_utf8_next(const unsigned char *s, uint32_t *cp) {
  if (s[0] < 0x80) {
    *cp = s[0];
    return 1;
  }
  if (s[0] < 0xE0) {
    *cp = (uint32_t)(s[0] & 0x1F) << 6 | (s[1] & 0x3F);
    return 2;
  }
  if (s[0] < 0xF0) {
    *cp = (uint32_t)(s[0] & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
    return 3;
  }
  *cp = (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3F) << 12 | (uint32_t)(s[2] & 0x3F) << 6 | (s[3] & 0x3F);
  return 4;
}

int tok_utf8_put(uint32_t cp, char *out) {
  unsigned char *o = (unsigned char *)out;
  if (cp < 0x80) {
    o[0] = (unsigned char)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (unsigned char)(0xC0 | cp >> 6);
    o[1] = (unsigned char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (unsigned char)(0xE0 | cp >> 12);
    o[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
    o[2] = (unsigned char)(0x80 | (cp & 0x3F));
    return 3;
  }
  o[0] = (unsigned char)(0xF0 | cp >> 18);
  o[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
  o[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
  o[3] = (unsigned char)(0x80 | (cp & 0x3F));
  return 4;
}

uint32_t tok_utf8_prev(const unsigned char *s, size_t at) {
  size_t i = at - 1;
  while (i > 0 && (s[i] & 0xC0) == 0x80) i--;
  uint32_t cp;
  tok_utf8_next(s + i, &cp);
  return cp;
}

// The length of the well-formed sequence at s[0..n) (Unicode table 3-7), or,
// when it is ill-formed, minus the length of its maximal subpart (at least 1).
static int utf8_seq(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  if (c < 0x80) return 1;
  int need;
  unsigned lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) need = 1;
  else if (c == 0xE0) need = 2, lo = 0xA0;
  else if (c >= 0xE1 && c <= 0xEC) need = 2;
  else if (c == 0xED) need = 2, hi = 0x9F;
  else if (c >= 0xEE && c <= 0xEF) need = 2;
  else if (c == 0xF0) need = 3, lo = 0x90;
  else if (c >= 0xF1 && c <= 0xF3) need = 3;
  else if (c == 0xF4) need = 3, hi = 0x8F;
  else return -1;
  for (int k = 1; k <= need; k++) {
    if ((size_t)k >= n || s[k] < lo || s[k] > hi) return -k;
    lo = 0x80, hi = 0xBF;
  }
  return need + 1;
}

size_t eng_tok_utf8_valid(const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  size_t i = 0;
  while (i < n) {
    if (u[i] < 0x80) {
      i++;
      continue;
    }
    int k = utf8_seq(u + i, n - i);
    if (k < 0) return i;
    i += (size_t)k;
  }
  return n;
}

int eng_tok_utf8_repair(const char *s, size_t n, char **out, size_t *len, eng_err *e) {
  // Each bad byte becomes at most 3 bytes (U+FFFD).
  char *o = malloc(3 * n + 1);
  if (!o) return eng_err_set(e, ENG_ENOMEM, "cannot allocate %zu bytes of repaired text", 3 * n + 1);
  const unsigned char *u = (const unsigned char *)s;
  size_t i = 0, w = 0;
  while (i < n) {
    int k = utf8_seq(u + i, n - i);
    if (k > 0) {
      memcpy(o + w, s + i, (size_t)k);
      w += (size_t)k, i += (size_t)k;
    } else {
      w += (size_t)tok_utf8_put(0xFFFD, o + w);
      i += (size_t)-k;
    }
  }
  o[w] = '\0';
  *out = o;
  *len = w;
  return ENG_OK;
}

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves,
// the rest (controls, space, 0x7F-0xA0, 0xAD) for 256 + their rank.
uint32_t tok_byte_char(uint8_t b) {
  if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) return b;
  uint32_t n = 0;
  for (unsigned x = 0; x < b; x++)
    if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE)) n++;
  return 256 + n;
}

int tok_char_byte(uint32_t cp) {
  if (cp < 256) return ((cp >= '!' && cp <= '~') || (cp >= 0xA1 && cp <= 0xAC) || cp >= 0xAE) ? (int)cp : -1;
  if (cp >= 256 + 68) return -1; // 68 bytes are remapped
  uint32_t n = cp - 256;
  for (unsigned x = 0; x < 256; x++)
    if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE) && n-- == 0) return (int)x;
  return -1;
}

int tok_is_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

int tok_is_word(uint32_t cp) {
  switch (utf8proc_category((utf8proc_int32_t)cp)) {
  case UTF8PROC_CATEGORY_LU:
  case UTF8PROC_CATEGORY_LL:
  case UTF8PROC_CATEGORY_LT:
  case UTF8PROC_CATEGORY_LM:
  case UTF8PROC_CATEGORY_LO:
  case UTF8PROC_CATEGORY_NL:
  case UTF8PROC_CATEGORY_MN:
  case UTF8PROC_CATEGORY_MC:
  case UTF8PROC_CATEGORY_ME:
  case UTF8PROC_CATEGORY_ND:
  case UTF8PROC_CATEGORY_PC:
    return 1;
  default:
    // Join controls, and the symbols that are Other_Alphabetic (circled and
    // squared Latin letters).
    return cp == 0x200C || cp == 0x200D || (cp >= 0x24B6 && cp <= 0x24E9) || (cp >= 0x1F130 && cp <= 0x1F149) ||
           (cp >= 0x1F150 && cp <= 0x1F169) || (cp >= 0x1F170 && cp <= 0x1F189);
  }
}
