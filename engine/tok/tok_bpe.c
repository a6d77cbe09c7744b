// BPE on one pre-token, as tokenizers' Word::merge_all does it: the
// pre-token's bytes through the byte-to-unicode map are the first symbols;
// the pair of lowest rank merges first (the leftmost among equal ranks),
// from a heap of candidate merges, stale entries skipped when popped.
// Results of short pre-tokens are cached per encoder.
#include <stdlib.h>
#include <string.h>

#include "common/hash.h"
#include "tok/tok_impl.h"

enum {
  CACHE_SLOTS = 1 << 16,  // open addressing, kept at most half full
  CACHE_MAX_KEY = 256,    // longer pre-tokens are merged every time
};

typedef struct tok_sym sym_t;
typedef struct tok_heap_item item_t;

static int item_less(const item_t *a, const item_t *b) {
  return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

// A 4-ary min-heap: half the depth of a binary one, and a node's children
// share a cache line, which is what a pre-token of a million bytes (a run
// of white space) is bound by.
static void heap_push(eng_tok_enc *enc, size_t *n, item_t it) {
  item_t *h = enc->heap;
  size_t i = (*n)++;
  while (i > 0) {
    size_t p = (i - 1) / 4;
    if (!item_less(&it, &h[p])) break;
    h[i] = h[p];
    i = p;
  }
  h[i] = it;
}

static item_t heap_pop(eng_tok_enc *enc, size_t *n) {
  item_t *h = enc->heap;
  item_t top = h[0], last = h[--*n];
  size_t i = 0;
  for (;;) {
    size_t c = 4 * i + 1;
    if (c >= *n) break;
    size_t end = c + 4 < *n ? c + 4 : *n, best = c;
    for (size_t k = c + 1; k < end; k++)
      if (item_less(&h[k], &h[best])) best = k;
    if (!item_less(&h[best], &last)) break;
    h[i] = h[best];
    i = best;
  }
  if (*n) h[i] = last;
  return top;
}

// Merges the symbols of bytes p[0..n) into enc->sym, the live ones linked by
// next from symbol 0 (merges keep the left symbol, so 0 stays); *m is 0 when
// no byte had a symbol.
static int bpe_merge(eng_tok_enc *enc, const unsigned char *p, size_t n, size_t *count, eng_err *e) {
  const eng_tok *t = enc->t;
  // A heap entry per adjacent pair at most, plus one per merge.
  if (tok_grow((void **)&enc->sym, &enc->sym_cap, n, sizeof *enc->sym) ||
      tok_grow((void **)&enc->heap, &enc->heap_cap, 2 * n + 1, sizeof *enc->heap))
    return eng_err_set(e, ENG_ENOMEM, "%s: cannot allocate a word of %zu bytes", t->name, n);
  sym_t *s = enc->sym;
  size_t m = 0;
  for (size_t i = 0; i < n; i++) {
    int32_t id = t->byte_id[p[i]];
    if (id < 0) {
      // Not in the vocabulary: the unk token (fused with an unk just before
      // when fuse_unk), else the byte is dropped, as tokenizers does.
      if (t->unk_id < 0) continue;
      if (t->fuse_unk && m > 0 && s[m - 1].id == t->unk_id && s[m - 1].len > 0 && t->byte_id[p[i - 1]] < 0) {
        s[m - 1].len++;
        continue;
      }
      id = t->unk_id;
    }
    s[m] = (sym_t){id, (int32_t)m - 1, (int32_t)m + 1, 1};
    m++;
  }
  *count = m;
  if (!m) return ENG_OK;
  s[m - 1].next = -1;
  size_t hn = 0;
  for (size_t i = 0; i + 1 < m; i++) {
    const tok_merge *mg = tok_merges_get(&t->merges, s[i].id, s[i + 1].id);
    if (mg) heap_push(enc, &hn, (item_t){mg->rank, (uint32_t)i, mg->id});
  }
  while (hn) {
    item_t top = heap_pop(enc, &hn);
    sym_t *cur = &s[top.pos];
    if (!cur->len || cur->next < 0) continue;
    sym_t *right = &s[cur->next];
    const tok_merge *mg = tok_merges_get(&t->merges, cur->id, right->id);
    if (!mg || mg->id != top.id) continue; // stale
    cur->id = top.id;
    cur->len += right->len;
    right->len = 0;
    cur->next = right->next;
    if (cur->next >= 0) s[cur->next].prev = (int32_t)top.pos;
    if (cur->prev >= 0) {
      const tok_merge *pm = tok_merges_get(&t->merges, s[cur->prev].id, cur->id);
      if (pm) heap_push(enc, &hn, (item_t){pm->rank, (uint32_t)cur->prev, pm->id});
    }
    if (cur->next >= 0) {
      const tok_merge *nm = tok_merges_get(&t->merges, cur->id, s[cur->next].id);
      if (nm) heap_push(enc, &hn, (item_t){nm->rank, top.pos, nm->id});
    }
  }
  return ENG_OK;
}

static tok_cache_entry *cache_slot(eng_tok_enc *enc, const char *key, size_t len, uint64_t h) {
  for (uint32_t i = (uint32_t)h & enc->cache_mask;; i = (i + 1) & enc->cache_mask) {
    tok_cache_entry *c = &enc->cache[i];
    if (!c->key_len) return c;
    if (c->hash == h && c->key_len == len && memcmp(enc->cache_keys + c->key_off, key, len) == 0) return c;
  }
}

static int emit(eng_tok_ids *out, const int32_t *ids, const uint32_t *lens, uint32_t n, uint32_t off) {
  for (uint32_t k = 0; k < n; k++) {
    if (eng_tok_ids_push(out, ids[k], off)) return ENG_ENOMEM;
    off += lens[k];
  }
  return ENG_OK;
}

int tok_bpe(eng_tok_enc *enc, const tok_piece *pc, eng_tok_ids *out, eng_err *e) {
  const eng_tok *t = enc->t;
  const unsigned char *p = (const unsigned char *)pc->p;
  size_t n = pc->len;
  if (t->ignore_merges) {
    // The whole pre-token may be a token of its own, merges or not.
    if (tok_grow((void **)&enc->mapped, &enc->mapped_cap, 2 * n + 1, 1))
      return eng_err_set(e, ENG_ENOMEM, "%s: cannot allocate a word of %zu bytes", t->name, n);
    size_t w = 0;
    for (size_t i = 0; i < n; i++) w += (size_t)tok_utf8_put(tok_byte_char(p[i]), enc->mapped + w);
    int32_t id = tok_strmap_get(&t->vocab, enc->mapped, w);
    if (id >= 0) return eng_tok_ids_push(out, id, pc->off) ? eng_err_set(e, ENG_ENOMEM, "%s: out of memory", t->name) : 0;
  }
  tok_cache_entry *slot = NULL;
  uint64_t h = 0;
  if (n < CACHE_MAX_KEY) {
    h = eng_fnv1a64(ENG_FNV1A64_INIT, p, n);
    slot = cache_slot(enc, pc->p, n, h);
    if (slot->key_len)
      return emit(out, enc->cache_ids + slot->val_off, enc->cache_lens + slot->val_off, slot->n, pc->off)
                 ? eng_err_set(e, ENG_ENOMEM, "%s: out of memory", t->name)
                 : ENG_OK;
  }
  size_t m = 0;
  int rc = bpe_merge(enc, p, n, &m, e);
  if (rc) return rc;
  size_t start = out->n;
  uint32_t off = pc->off;
  for (int32_t i = m ? 0 : -1; i >= 0; i = enc->sym[i].next) {
    if (eng_tok_ids_push(out, enc->sym[i].id, off)) return eng_err_set(e, ENG_ENOMEM, "%s: out of memory", t->name);
    off += enc->sym[i].len;
  }
  if (!slot) return ENG_OK;
  // Cache it; a full cache starts over rather than tracking use.
  size_t k = out->n - start;
  if (2 * (enc->cache_n + 1) > CACHE_SLOTS ||
      tok_grow((void **)&enc->cache_keys, &enc->keys_cap, enc->keys_len + n, 1) ||
      tok_grow2((void **)&enc->cache_ids, sizeof *enc->cache_ids, (void **)&enc->cache_lens, sizeof *enc->cache_lens,
                &enc->vals_cap, enc->vals_len + k)) {
    memset(enc->cache, 0, CACHE_SLOTS * sizeof *enc->cache);
    enc->cache_n = 0;
    enc->keys_len = enc->vals_len = 0;
    return ENG_OK;
  }
  memcpy(enc->cache_keys + enc->keys_len, p, n);
  for (size_t j = 0; j < k; j++) {
    enc->cache_ids[enc->vals_len + j] = out->ids[start + j];
    uint32_t end = start + j + 1 < out->n ? out->off[start + j + 1] : off;
    enc->cache_lens[enc->vals_len + j] = end - out->off[start + j];
  }
  *slot = (tok_cache_entry){h, (uint32_t)enc->keys_len, (uint32_t)n, (uint32_t)enc->vals_len, (uint32_t)k};
  enc->keys_len += n;
  enc->vals_len += k;
  enc->cache_n++;
  return ENG_OK;
}
