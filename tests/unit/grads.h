// A run's bits, for tests that compare policies: the gradients of one
// backward on a batch (every tensor, HF order), its logits, and the losses
// of GRADS_STEPS training steps on the same batch, whose update path streams
// too. grads_run checks the arena peak against the cap and that the layers
// really streamed in.
#ifndef TESTS_UNIT_GRADS_H
#define TESTS_UNIT_GRADS_H

#include <stdlib.h>

#include "check.h"
#include "engine.h"
#include "model/layout.h"

enum { GRADS_STEPS = 3 };

typedef struct result {
  double loss[GRADS_STEPS];
  float *grads;   // every gradient after the first step's backward, HF order
  float *logits;  // of the first batch
  size_t n_grads;
} result;

typedef struct grab {
  eng_run *r;
  float *dst;
  size_t n;
} grab;

static inline int grab_grad(void *ctx, int shard, const eng_tensor *t) {
  (void)shard;
  grab *g = ctx;
  eng_err e = {0};
  CHECK_OK(eng_debug_param(g->r, t->name, 'g', g->dst + g->n, t->numel, &e), &e);
  g->n += t->numel;
  return 0;
}

static inline void grads_run(eng_spec *s, result *out, int32_t *ids, int32_t *labels) {
  eng_err e = {0};
  eng_run *r;
  CHECK_OK(eng_open(s, &r, &e), &e);
  eng_layout lo;
  eng_layout_init(&lo, &s->config);
  size_t nl = (size_t)s->batch * s->seq_len * s->config.vocab;
  out->logits = malloc(nl * sizeof(float));
  out->grads = malloc(lo.total_numel * sizeof(float));
  double loss;
  CHECK_OK(eng_debug_grads(r, ids, labels, NULL, &loss, out->logits, &e), &e);
  grab g = {r, out->grads, 0};
  eng_layout_visit(&lo, grab_grad, &g);
  out->n_grads = g.n;
  size_t model_bytes = lo.total_numel * sizeof(float);
  for (int i = 0; i < GRADS_STEPS; i++) {
    eng_metrics m;
    CHECK_OK(eng_step_batch(r, ids, labels, NULL, &m, &e), &e);
    out->loss[i] = m.loss;
    CHECK(m.peak_arena <= s->device_cap, "arena peak %zu exceeds the cap %zu", m.peak_arena, s->device_cap);
    // Forward and backward each bring every layer in at least once.
    CHECK(m.bytes_in >= 2 * (model_bytes - lo.embed.numel * sizeof(float) - lo.head_numel * sizeof(float)),
          "only %llu bytes copied in for a %zu-byte model", (unsigned long long)m.bytes_in, model_bytes);
  }
  eng_close(r);
}

static inline void grads_free(result *r) {
  free(r->grads);
  free(r->logits);
}

#endif
