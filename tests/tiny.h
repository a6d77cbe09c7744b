// The tests' model: a Qwen3-style config well under 1M parameters (grouped
// KV heads, q/k norms), or its Qwen3.5 hybrid, trained on the demo text that
// ships in data/demo.
#ifndef TESTS_TINY_H
#define TESTS_TINY_H

#include <stdio.h>

#include "check.h"
#include "engine.h"

static inline void tiny_spec(eng_spec *s, int layers) {
  eng_spec_defaults(s);
  s->config = (eng_config){.arch = ENG_ARCH_QWEN3, .vocab = 256, .d_model = 64, .n_layers = layers,
                           .n_heads = 4, .n_kv_heads = 2, .head_dim = 16, .d_ff = 176,
                           .max_pos = 512, .rope_theta = 10000.0f, .rms_eps = 1e-6f,
                           .init_std = 0.02f, .tie_embeddings = 0, .qkv_bias = 0, .qk_norm = 1};
  static char path[1024];
  snprintf(path, sizeof path, "%s/data/demo/licenses.txt", TRAIND_SOURCE_DIR);
  s->train_path = path;
  s->seq_len = 64;
  s->batch = 4;
  s->lr = 3e-3f;
  s->min_lr = 3e-4f;
  s->warmup_steps = 5;
  s->total_steps = 300;
  s->seed = 42;
  s->device_cap = (size_t)256 << 20;
}

// The tiny model as a Qwen3.5 hybrid: Gated DeltaNet layers (2 key heads of
// 16, 4 value heads of 12, conv 4), every full_every-th layer gated full
// attention rotating 8 of its 16 dims, zero-centred norms.
static inline void tiny_hybrid(eng_config *c, int full_every) {
  eng_arch_apply(c, ENG_ARCH_QWEN3_5); // the output gate, zero-centred norms
  c->rope_dim = 8, c->full_every = full_every;
  c->dn.k_heads = 2, c->dn.v_heads = 4, c->dn.k_dim = 16, c->dn.v_dim = 12, c->dn.conv = 4;
}

// Trains steps [from, to) of spec s into loss[from..to): resumed from
// `load` first when given (it must resume at `from`), saved through `save`
// after every step i + 1 that save_when(i + 1) accepts (NULL: never). The
// _open form leaves the run open for the caller to close.
static inline eng_run *tiny_train_open(const eng_spec *s, double *loss, int from, int to, const eng_store *save,
                                       int (*save_when)(int step), const eng_store *load) {
  eng_err e = {0};
  eng_run *r;
  CHECK_OK(eng_open(s, &r, &e), &e);
  if (load) CHECK_OK(eng_load(r, load, &e), &e);
  CHECK(eng_steps_done(r) == from, "resumed at step %lld, expected %d", (long long)eng_steps_done(r), from);
  for (int i = from; i < to; i++) {
    eng_metrics m;
    CHECK_OK(eng_step(r, &m, &e), &e);
    loss[i] = m.loss;
    if (save && save_when && save_when(i + 1)) CHECK_OK(eng_save(r, save, &e), &e);
  }
  return r;
}

static inline void tiny_train(const eng_spec *s, double *loss, int from, int to, const eng_store *save,
                              int (*save_when)(int step), const eng_store *load) {
  eng_close(tiny_train_open(s, loss, from, to, save, save_when, load));
}

#endif
