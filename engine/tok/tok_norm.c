// The Unicode normalizers of tokenizer.json (NFC, NFD, NFKC, NFKD), by
// utf8proc, made to agree with tokenizers' own: its normalizer
// (unicode-normalization-alignments 0.1.12) has Unicode 9.0 tables, so a
// character that a later version gave a decomposition, a combining class or
// a part in a composition is to it an unassigned starter, left as it is and
// blocking compositions across it. Such characters (the ranges below: those
// utf8proc's Unicode 15 tables give one of these roles and the 9.0 tables do
// not, found by comparing the two) are kept out of utf8proc: the text is
// normalized in the runs between them.
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tok/tok_impl.h"

static utf8proc_option_t norm_options(enum tok_norm_kind k) {
  switch (k) {
  case TOK_NFC: return UTF8PROC_STABLE | UTF8PROC_COMPOSE;
  case TOK_NFD: return UTF8PROC_STABLE | UTF8PROC_DECOMPOSE;
  case TOK_NFKC: return UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
  case TOK_NFKD: return UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
  }
  return UTF8PROC_STABLE;
}

static const uint32_t AFTER_UNICODE9[][2] = {
  {0x7FD, 0x7FD}, {0x898, 0x89F}, {0x8CA, 0x8D3}, {0x9FE, 0x9FE}, {0xC3C, 0xC3C}, {0xD3B, 0xD3C}, {0xEBA, 0xEBA},
  {0x1715, 0x1715}, {0x1ABF, 0x1ACE}, {0x1DF6, 0x1DFA}, {0x2ADD, 0x2ADD}, {0x32FF, 0x32FF}, {0xA7F2, 0xA7F4},
  {0xA82C, 0xA82C}, {0xAB69, 0xAB69}, {0x10781, 0x10785}, {0x10787, 0x107B0}, {0x107B2, 0x107BA}, {0x10D24, 0x10D27},
  {0x10EAB, 0x10EAC}, {0x10EFD, 0x10EFF}, {0x10F46, 0x10F50}, {0x10F82, 0x10F85}, {0x11070, 0x11070},
  {0x1133B, 0x1133B}, {0x1145E, 0x1145E}, {0x11839, 0x1183A}, {0x11930, 0x11930}, {0x11935, 0x11935},
  {0x11938, 0x11938}, {0x1193D, 0x1193E}, {0x11943, 0x11943}, {0x119E0, 0x119E0}, {0x11A34, 0x11A34},
  {0x11A47, 0x11A47}, {0x11A99, 0x11A99}, {0x11D42, 0x11D42}, {0x11D44, 0x11D45}, {0x11D97, 0x11D97},
  {0x11F41, 0x11F42}, {0x16FF0, 0x16FF1}, {0x1D157, 0x1D158}, {0x1D1B9, 0x1D1BA}, {0x1E030, 0x1E06D},
  {0x1E08F, 0x1E08F}, {0x1E130, 0x1E136}, {0x1E2AE, 0x1E2AE}, {0x1E2EC, 0x1E2EF}, {0x1E4EC, 0x1E4EF},
  {0x1F16C, 0x1F16C}, {0x1FBF0, 0x1FBF9},
};

static int after_unicode9(uint32_t cp) {
  if (cp < AFTER_UNICODE9[0][0]) return 0;
  size_t lo = 0, hi = sizeof AFTER_UNICODE9 / sizeof AFTER_UNICODE9[0];
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (AFTER_UNICODE9[mid][1] < cp) lo = mid + 1;
    else hi = mid;
  }
  return lo < sizeof AFTER_UNICODE9 / sizeof AFTER_UNICODE9[0] && AFTER_UNICODE9[lo][0] <= cp;
}

// One normalizer over src[0..n) into a malloc'd *dst of *m bytes, the
// characters after Unicode 9.0 passed through.
static int norm_runs(const char *src, size_t n, utf8proc_option_t opt, char **dst, size_t *m) {
  size_t cap = 4 * n + 16, w = 0;
  char *out = malloc(cap);
  if (!out) return UTF8PROC_ERROR_NOMEM;
  size_t run = 0, i = 0;
  while (i <= n) {
    uint32_t cp = 0;
    int k = i < n ? tok_utf8_next((const unsigned char *)src + i, &cp) : 0;
    if (i < n && !after_unicode9(cp)) {
      i += (size_t)k;
      continue;
    }
    if (i > run) {
      utf8proc_uint8_t *r = NULL;
      utf8proc_ssize_t rn = utf8proc_map((const utf8proc_uint8_t *)src + run, (utf8proc_ssize_t)(i - run), &r, opt);
      if (rn < 0) {
        free(out);
        return (int)rn;
      }
      if (w + (size_t)rn + 4 > cap) {
        cap = 2 * (w + (size_t)rn + 4);
        char *o = realloc(out, cap);
        if (!o) {
          free(r);
          free(out);
          return UTF8PROC_ERROR_NOMEM;
        }
        out = o;
      }
      memcpy(out + w, r, (size_t)rn);
      w += (size_t)rn;
      free(r);
    }
    if (i == n) break;
    if (w + 4 > cap) {
      cap = 2 * cap;
      char *o = realloc(out, cap);
      if (!o) {
        free(out);
        return UTF8PROC_ERROR_NOMEM;
      }
      out = o;
    }
    memcpy(out + w, src + i, (size_t)k);
    w += (size_t)k;
    i += (size_t)k;
    run = i;
  }
  *dst = out;
  *m = w;
  return 0;
}

int tok_normalize(const eng_tok *t, tok_arena *a, const char *src, size_t n, const char **out, size_t *out_len,
                  eng_err *e) {
  *out = src;
  *out_len = n;
  if (!t->n_norm || !n) return ENG_OK;
  // ASCII is its own normal form under all four.
  size_t i = 0;
  while (i < n && !((unsigned char)src[i] & 0x80)) i++;
  if (i == n) return ENG_OK;
  const char *cur = src;
  size_t len = n;
  for (int k = 0; k < t->n_norm; k++) {
    char *dst = NULL;
    size_t m = 0;
    int rc = norm_runs(cur, len, norm_options(t->norm[k]), &dst, &m);
    if (rc < 0)
      return eng_err_set(e, rc == UTF8PROC_ERROR_NOMEM ? ENG_ENOMEM : ENG_EINVAL, "%s: normalizing: %s", t->name,
                         utf8proc_errmsg(rc));
    if (m == len && memcmp(dst, cur, len) == 0) {
      free(dst);
      continue;
    }
    char *p = tok_arena_alloc(a, m + 1);
    if (!p) {
      free(dst);
      return eng_err_set(e, ENG_ENOMEM, "%s: cannot allocate normalized text", t->name);
    }
    memcpy(p, dst, m);
    free(dst);
    cur = p;
    len = m;
  }
  *out = cur;
  *out_len = len;
  return ENG_OK;
}
