// Host-resident model state: per shard (DESIGN §2), the fp32 master weights,
// the host gradient store and the optimizer moments. Shards are separate
// 64-byte aligned allocations so each streams and updates as a unit.
#ifndef ENG_MODEL_MODEL_H
#define ENG_MODEL_MODEL_H

#include <stdint.h>

#include "model/config.h"
#include "model/layout.h"

typedef struct eng_shard {
  size_t numel;
  float *w;   // fp32 master weights
  float *g;   // gradient store, filled by the backward (zeroed before each step)
  float *m;   // AdamW first moment
  float *v;   // AdamW second moment
} eng_shard;

typedef struct eng_model {
  eng_config cfg;
  eng_layout lo;
  eng_shard *shards; // lo.n_shards entries
} eng_model;

// Allocates every shard (weights, gradients, moments zeroed). Fails with
// ENG_ENOMEM naming the bytes that could not be allocated.
int eng_model_alloc(eng_model *m, const eng_config *c, eng_err *e);
void eng_model_free(eng_model *m);

// Random init as transformers does for these models: linear weights and the
// embedding ~ N(0, init_std), norm weights 1, biases 0. Each tensor draws
// from its own RNG stream of the seed, so the result is independent of order.
void eng_model_init_random(eng_model *m, uint64_t seed);

// Pointer to tensor t of shard s inside the weights (which = 'w') or the
// gradients ('g').
float *eng_model_tensor(eng_model *m, int s, const eng_tensor *t, char which);

// Bytes of host memory held by the model state.
size_t eng_model_host_bytes(const eng_model *m);

#endif
