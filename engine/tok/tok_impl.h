// Internals of engine/tok shared by its files: the loaded tokenizer, its
// tables and the per-thread encoder. Not part of the engine's API.
#ifndef ENG_TOK_IMPL_H
#define ENG_TOK_IMPL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>

#include "tok/tok.h"

// Open-addressing map from byte strings to int32 (the vocabulary: token
// content as tokenizer.json writes it -> id). Keys live in pool.
typedef struct tok_strmap {
  uint32_t mask;   // capacity - 1 (a power of two)
  uint32_t *slot;  // entry index + 1, 0 = empty
  uint32_t n, cap; // entries
  uint32_t *koff, *klen;
  int32_t *val;
  char *pool;
  size_t pool_len, pool_cap;
} tok_strmap;

int tok_strmap_init(tok_strmap *m, uint32_t expect);
void tok_strmap_free(tok_strmap *m);
// Adds key -> val; a key already there keeps its first value. 0 or ENG_ENOMEM.
int tok_strmap_put(tok_strmap *m, const char *key, size_t len, int32_t val);
// The value of key, or -1.
int32_t tok_strmap_get(const tok_strmap *m, const char *key, size_t len);

// BPE merges: (left id, right id) -> (rank, merged id).
typedef struct tok_merge {
  uint64_t key; // (uint64)left << 32 | right, +1 so 0 marks an empty slot
  uint32_t rank;
  int32_t id;
} tok_merge;

typedef struct tok_merges {
  uint32_t mask;
  tok_merge *slot;
} tok_merges;

// The rank and merged id of (a, b) or 0 when they do not merge.
static inline const tok_merge *tok_merges_get(const tok_merges *m, int32_t a, int32_t b) {
  uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
  uint64_t h = key * 0x9E3779B97F4A7C15ull;
  for (uint32_t i = (uint32_t)(h >> 32) & m->mask;; i = (i + 1) & m->mask) {
    if (m->slot[i].key == key) return &m->slot[i];
    if (!m->slot[i].key) return 0;
  }
}

enum tok_norm_kind { TOK_NFC, TOK_NFD, TOK_NFKC, TOK_NFKD };

// Split's delimiter behaviours, by their tokenizer.json names.
enum tok_split_behavior { TOK_ISOLATED, TOK_REMOVED, TOK_MERGED_PREV, TOK_MERGED_NEXT, TOK_CONTIGUOUS };

enum tok_pre_kind { TOK_PRE_SPLIT, TOK_PRE_BYTELEVEL };

typedef struct tok_pre {
  enum tok_pre_kind kind;
  pcre2_code *re; // Split's pattern, or ByteLevel's GPT-2 regex when use_regex; NULL: none
  enum tok_split_behavior behavior;
  int invert;
  int add_prefix_space; // ByteLevel
} tok_pre;

typedef struct tok_added {
  int32_t id;
  char *content; // as tokenizer.json writes it (what decoding gives back)
  char *match;   // as matched: content, normalized for normalized tokens
  size_t match_len;
  int special, lstrip, rstrip, single_word, normalized;
} tok_added;

struct eng_tok {
  char *name; // the file, in messages
  uint64_t hash;
  int32_t vocab_size; // max id + 1 over the vocabulary and the added tokens

  tok_strmap vocab;           // content -> id
  const char **id_str;        // id -> content (NUL-terminated, in vocab.pool), NULL where no token
  uint32_t *id_len;
  tok_merges merges;
  int32_t byte_id[256];       // id of the one-character token of each byte, -1 when none
  int32_t unk_id;             // -1: none
  int fuse_unk, ignore_merges;

  int n_norm;
  enum tok_norm_kind norm[8];

  int n_pre;
  tok_pre pre[8];

  tok_added *added; // sorted by id
  int n_added;
  // Per pass (0: raw, matched before normalizing; 1: normalized), the added
  // tokens by first byte, longest first: bucket[p][first[p][c] ..
  // first[p][c + 1]) index added[].
  uint32_t first[2][257];
  uint32_t *bucket[2];

  int32_t *tmpl_pre, *tmpl_post; // the post-processor's ids around $A
  int n_tmpl_pre, n_tmpl_post;
};

// A piece of text on its way through the pipeline: bytes at p, the offset of
// its start in the caller's text, and the largest offset its tokens may
// report (the end of the caller's piece where normalization changed it, so
// that offsets stay inside it; UINT32_MAX otherwise).
typedef struct tok_piece {
  const char *p;
  uint32_t len;
  uint32_t off;
  uint32_t lim;
  int32_t added; // an added token's id, or -1
} tok_piece;

typedef struct tok_pieces {
  tok_piece *v;
  size_t n, cap;
} tok_pieces;

// Appends a piece (lim UINT32_MAX).
int tok_pieces_push(tok_pieces *ps, const char *p, size_t len, uint32_t off, int32_t added);

// Makes room for need elements of size bytes in the array *p of *cap
// elements, doubling from 64: 0 or ENG_ENOMEM (then *p is as it was).
int tok_grow(void **p, size_t *cap, size_t need, size_t size);
// The same for two arrays that share one capacity (*cap elements each).
int tok_grow2(void **a, size_t asize, void **b, size_t bsize, size_t *cap, size_t need);

// A growing byte arena for text the pipeline makes (normalized pieces,
// prefixed spaces): chunks never move, so pieces may point into them.
typedef struct tok_arena {
  char **chunk;
  size_t n, cap, used, size;
  size_t first; // the first chunk's size, kept across resets
} tok_arena;

char *tok_arena_alloc(tok_arena *a, size_t n);
void tok_arena_reset(tok_arena *a);
void tok_arena_free(tok_arena *a);

// One cached BPE result: the ids and each token's byte count.
typedef struct tok_cache_entry {
  uint64_t hash;
  uint32_t key_off, key_len;
  uint32_t val_off, n;
} tok_cache_entry;

struct eng_tok_enc {
  const eng_tok *t;
  pcre2_match_data *md;
  tok_pieces a, b;      // the pieces between pre-tokenizer steps
  tok_arena arena;
  // BPE scratch: the symbols of one word
  struct tok_sym { int32_t id; int32_t prev, next; uint32_t len; } *sym;
  size_t sym_cap;
  struct tok_heap_item { uint32_t rank, pos; int32_t id; } *heap;
  size_t heap_cap;
  // word cache: pre-token bytes -> ids and lengths
  tok_cache_entry *cache;
  uint32_t cache_mask, cache_n;
  char *cache_keys;
  size_t keys_len, keys_cap;
  int32_t *cache_ids;
  uint32_t *cache_lens;
  size_t vals_len, vals_cap;
  char *mapped; // one pre-token through the byte map (ignore_merges lookups)
  size_t mapped_cap;
};

// Unicode helpers (tok_utf8.c).
// Decodes the code point at s (valid UTF-8 assumed) into *cp; returns its length.
int tok_utf8_next(const unsigned char *s, uint32_t *cp);
// Encodes cp into out (4 bytes room); returns the length.
int tok_utf8_put(uint32_t cp, char *out);
// The code point of the character before s + at (valid UTF-8 assumed).
uint32_t tok_utf8_prev(const unsigned char *s, size_t at);
// The byte-to-unicode map of ByteLevel (GPT-2's bytes_to_unicode).
uint32_t tok_byte_char(uint8_t b);
// The byte of a mapped character, or -1.
int tok_char_byte(uint32_t cp);
// Rust's char::is_whitespace (the White_Space property) and the regex
// crate's \w (Alphabetic, marks, decimal digits, connector punctuation,
// join controls), for added tokens' lstrip/rstrip/single_word.
int tok_is_space(uint32_t cp);
int tok_is_word(uint32_t cp);

// Normalizes src[0..n) by t's normalizers into the arena; *out, *out_len.
// Returns 0 (text unchanged when t has no normalizer: *out = src) or an error.
int tok_normalize(const eng_tok *t, tok_arena *a, const char *src, size_t n, const char **out, size_t *out_len,
                  eng_err *e);

// Cuts pieces out of text[0..n) (offset base off) at the added tokens of the
// raw (normalized=0) or normalized pass, appending to out.
int tok_added_split(const eng_tok *t, int normalized, const char *text, size_t n, uint32_t off, tok_pieces *out);

// Runs pre-tokenizer step s over in, appending to out.
int tok_pre_run(eng_tok_enc *enc, const tok_pre *s, const tok_pieces *in, tok_pieces *out, eng_err *e);

// Appends the BPE tokens of one pre-token to out.
int tok_bpe(eng_tok_enc *enc, const tok_piece *pc, eng_tok_ids *out, eng_err *e);


#endif
