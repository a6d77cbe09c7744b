// Deterministic random numbers: splitmix64 for seeding, xoshiro256** for
// streams. The state is 4 words so it can be saved in a checkpoint and a
// resumed run draws the same numbers.
#ifndef ENG_COMMON_RNG_H
#define ENG_COMMON_RNG_H

#include <stdint.h>

typedef struct eng_rng {
  uint64_t s[4];
} eng_rng;

// Seeds from (seed, stream): different streams of one seed are independent.
void eng_rng_seed(eng_rng *r, uint64_t seed, uint64_t stream);
uint64_t eng_rng_u64(eng_rng *r);
// Uniform in [0, n) without modulo bias.
uint64_t eng_rng_below(eng_rng *r, uint64_t n);
// Standard normal (Box-Muller in double, so it is exact across compilers).
double eng_rng_normal(eng_rng *r);
// Fisher-Yates shuffle of an index permutation.
void eng_rng_shuffle_u32(eng_rng *r, uint32_t *a, uint64_t n);

#endif
