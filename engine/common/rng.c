#include "common/rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void eng_rng_seed(eng_rng *r, uint64_t seed, uint64_t stream) {
  uint64_t x = seed ^ (stream * 0xd1342543de82ef95ull);
  for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t eng_rng_u64(eng_rng *r) {
  uint64_t *s = r->s;
  const uint64_t out = rotl(s[1] * 5, 7) * 9;
  const uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return out;
}

uint64_t eng_rng_below(eng_rng *r, uint64_t n) {
  // Rejection sampling: drop the top partial range so every value is equally likely.
  uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do x = eng_rng_u64(r);
  while (x >= limit);
  return x % n;
}

double eng_rng_normal(eng_rng *r) {
  double u1 = ((eng_rng_u64(r) >> 11) + 1) * 0x1.0p-53; // (0, 1]
  double u2 = (eng_rng_u64(r) >> 11) * 0x1.0p-53;       // [0, 1)
  return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

void eng_rng_shuffle_u32(eng_rng *r, uint32_t *a, uint64_t n) {
  for (uint64_t i = n; i > 1; i--) {
    uint64_t j = eng_rng_below(r, i);
    uint32_t t = a[i - 1];
    a[i - 1] = a[j];
    a[j] = t;
  }
}
