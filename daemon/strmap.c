#include "strmap.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// A deleted slot keeps probing chains intact.
static const char tombstone[] = "";

static uint64_t hash(const char *s) { // FNV-1a
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static strmap_slot *find(const strmap *m, const char *key) {
  if (!m->cap) return NULL;
  for (size_t i = hash(key) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
    strmap_slot *s = &m->slots[i];
    if (!s->key) return NULL;
    if (s->key != tombstone && !strcmp(s->key, key)) return s;
  }
}

void *strmap_get(const strmap *m, const char *key) {
  strmap_slot *s = find(m, key);
  return s ? s->val : NULL;
}

static int grow(strmap *m) {
  // Sized from the live entries (tombstones are dropped), at most half full.
  size_t cap = 64;
  while (cap < (m->n + 1) * 2) cap *= 2;
  strmap_slot *old = m->slots, *slots = calloc(cap, sizeof *slots);
  if (!slots) return -1;
  size_t oldcap = m->cap;
  m->slots = slots;
  m->cap = cap;
  m->used = m->n;
  for (size_t i = 0; i < oldcap; i++) {
    if (!old[i].key || old[i].key == tombstone) continue;
    size_t j = hash(old[i].key) & (cap - 1);
    while (slots[j].key) j = (j + 1) & (cap - 1);
    slots[j] = old[i];
  }
  free(old);
  return 0;
}

int strmap_put(strmap *m, const char *key, void *val) {
  strmap_slot *s = find(m, key);
  if (s) {
    s->key = key;
    s->val = val;
    return 0;
  }
  if ((m->used + 1) * 4 > m->cap * 3 && grow(m)) return -1; // load factor 3/4
  size_t i = hash(key) & (m->cap - 1);
  while (m->slots[i].key && m->slots[i].key != tombstone) i = (i + 1) & (m->cap - 1);
  if (!m->slots[i].key) m->used++;
  m->slots[i] = (strmap_slot){key, val};
  m->n++;
  return 0;
}

void strmap_del(strmap *m, const char *key) {
  strmap_slot *s = find(m, key);
  if (!s) return;
  s->key = tombstone;
  s->val = NULL;
  m->n--;
}

void strmap_free(strmap *m) {
  free(m->slots);
  memset(m, 0, sizeof *m);
}
