// FNV-1a, 64 bits: the hash of short keys (tokens, words) and the digest that
// keys a cache by content (a tokenizer.json, a data file).
#ifndef ENG_COMMON_HASH_H
#define ENG_COMMON_HASH_H

#include <stddef.h>
#include <stdint.h>

#define ENG_FNV1A64_INIT 0xcbf29ce484222325ull

// Continues h (ENG_FNV1A64_INIT to start) over p[0..n).
static inline uint64_t eng_fnv1a64(uint64_t h, const void *p, size_t n) {
  const unsigned char *s = p;
  for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ull;
  return h;
}

#endif
