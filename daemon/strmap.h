// A hash map from strings to pointers for the loop's indexes (jobs by id,
// jobs by request id). Keys are borrowed: they must live as long as their
// entry (they point into the job they index).
#ifndef TRAIND_STRMAP_H
#define TRAIND_STRMAP_H

#include <stddef.h>

typedef struct strmap_slot {
  const char *key; // NULL: empty
  void *val;
} strmap_slot;

typedef struct strmap {
  strmap_slot *slots;
  size_t cap;   // a power of two (0 before the first put)
  size_t n;     // live entries
  size_t used;  // live entries + tombstones
} strmap;

void *strmap_get(const strmap *m, const char *key);
// Inserts or replaces; returns -1 when out of memory.
int strmap_put(strmap *m, const char *key, void *val);
void strmap_del(strmap *m, const char *key);
void strmap_free(strmap *m);

#endif
