// The tokenizer's containers: the vocabulary map, piece lists, the byte
// arena of made text, growable id lists.
#include <stdlib.h>
#include <string.h>

#include "common/hash.h"
#include "tok/tok_impl.h"

int tok_strmap_init(tok_strmap *m, uint32_t expect) {
  memset(m, 0, sizeof *m);
  uint32_t cap = 16;
  while (cap < 2 * expect + 16) cap *= 2;
  m->mask = cap - 1;
  m->slot = calloc(cap, sizeof *m->slot);
  m->cap = expect + 16;
  m->koff = malloc(m->cap * sizeof *m->koff);
  m->klen = malloc(m->cap * sizeof *m->klen);
  m->val = malloc(m->cap * sizeof *m->val);
  return m->slot && m->koff && m->klen && m->val ? ENG_OK : ENG_ENOMEM;
}

void tok_strmap_free(tok_strmap *m) {
  free(m->slot);
  free(m->koff);
  free(m->klen);
  free(m->val);
  free(m->pool);
  memset(m, 0, sizeof *m);
}

static int strmap_grow(tok_strmap *m) {
  uint32_t cap = (m->mask + 1) * 2;
  uint32_t *slot = calloc(cap, sizeof *slot);
  if (!slot) return ENG_ENOMEM;
  for (uint32_t k = 0; k < m->n; k++) {
    uint64_t h = eng_fnv1a64(ENG_FNV1A64_INIT, m->pool + m->koff[k], m->klen[k]);
    uint32_t i = (uint32_t)h & (cap - 1);
    while (slot[i]) i = (i + 1) & (cap - 1);
    slot[i] = k + 1;
  }
  free(m->slot);
  m->slot = slot;
  m->mask = cap - 1;
  return ENG_OK;
}

int32_t tok_strmap_get(const tok_strmap *m, const char *key, size_t len) {
  uint64_t h = eng_fnv1a64(ENG_FNV1A64_INIT, key, len);
  for (uint32_t i = (uint32_t)h & m->mask;; i = (i + 1) & m->mask) {
    uint32_t k = m->slot[i];
    if (!k) return -1;
    k--;
    if (m->klen[k] == len && memcmp(m->pool + m->koff[k], key, len) == 0) return m->val[k];
  }
}

int tok_strmap_put(tok_strmap *m, const char *key, size_t len, int32_t val) {
  if (tok_strmap_get(m, key, len) >= 0) return ENG_OK;
  if (2 * (m->n + 1) > m->mask + 1 && strmap_grow(m)) return ENG_ENOMEM;
  if (m->n == m->cap) {
    uint32_t cap = m->cap * 2;
    uint32_t *koff = realloc(m->koff, cap * sizeof *koff);
    if (!koff) return ENG_ENOMEM;
    m->koff = koff;
    uint32_t *klen = realloc(m->klen, cap * sizeof *klen);
    if (!klen) return ENG_ENOMEM;
    m->klen = klen;
    int32_t *v = realloc(m->val, cap * sizeof *v);
    if (!v) return ENG_ENOMEM;
    m->val = v;
    m->cap = cap;
  }
  if (tok_grow((void **)&m->pool, &m->pool_cap, m->pool_len + len + 1, 1)) return ENG_ENOMEM;
  memcpy(m->pool + m->pool_len, key, len);
  m->pool[m->pool_len + len] = '\0';
  m->koff[m->n] = (uint32_t)m->pool_len;
  m->klen[m->n] = (uint32_t)len;
  m->val[m->n] = val;
  m->pool_len += len + 1;
  uint64_t h = eng_fnv1a64(ENG_FNV1A64_INIT, key, len);
  uint32_t i = (uint32_t)h & m->mask;
  while (m->slot[i]) i = (i + 1) & m->mask;
  m->slot[i] = ++m->n;
  return ENG_OK;
}

int tok_grow(void **p, size_t *cap, size_t need, size_t size) {
  if (need <= *cap) return ENG_OK;
  size_t c = *cap ? *cap : 64;
  while (c < need) c *= 2;
  void *q = realloc(*p, c * size);
  if (!q) return ENG_ENOMEM;
  *p = q;
  *cap = c;
  return ENG_OK;
}

int tok_grow2(void **a, size_t asize, void **b, size_t bsize, size_t *cap, size_t need) {
  size_t ca = *cap, cb = *cap;
  if (tok_grow(a, &ca, need, asize) || tok_grow(b, &cb, need, bsize)) return ENG_ENOMEM;
  *cap = ca; // cb: the same, grown the same way
  return ENG_OK;
}

int tok_pieces_push(tok_pieces *ps, const char *p, size_t len, uint32_t off, int32_t added) {
  if (tok_grow((void **)&ps->v, &ps->cap, ps->n + 1, sizeof *ps->v)) return ENG_ENOMEM;
  ps->v[ps->n++] = (tok_piece){p, (uint32_t)len, off, UINT32_MAX, added};
  return ENG_OK;
}

char *tok_arena_alloc(tok_arena *a, size_t n) {
  if (a->n && a->used + n <= a->size) {
    char *p = a->chunk[a->n - 1] + a->used;
    a->used += n;
    return p;
  }
  if (tok_grow((void **)&a->chunk, &a->cap, a->n + 1, sizeof *a->chunk)) return NULL;
  size_t size = n > 65536 ? n : 65536;
  char *p = malloc(size);
  if (!p) return NULL;
  if (!a->n) a->first = size;
  a->chunk[a->n++] = p;
  a->size = size;
  a->used = n;
  return p;
}

void tok_arena_reset(tok_arena *a) {
  // Keep the first chunk: most encodes fit in it.
  for (size_t i = 1; i < a->n; i++) free(a->chunk[i]);
  a->n = a->n ? 1 : 0;
  a->size = a->n ? a->first : 0;
  a->used = 0;
}

void tok_arena_free(tok_arena *a) {
  for (size_t i = 0; i < a->n; i++) free(a->chunk[i]);
  free(a->chunk);
  memset(a, 0, sizeof *a);
}

int eng_tok_ids_push(eng_tok_ids *v, int32_t id, uint32_t off) {
  if (tok_grow2((void **)&v->ids, sizeof *v->ids, (void **)&v->off, sizeof *v->off, &v->cap, v->n + 1))
    return ENG_ENOMEM;
  v->ids[v->n] = id;
  v->off[v->n] = off;
  v->n++;
  return ENG_OK;
}

void eng_tok_ids_free(eng_tok_ids *v) {
  free(v->ids);
  free(v->off);
  memset(v, 0, sizeof *v);
}
