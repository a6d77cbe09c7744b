#include "model/model.h"

#include <stdlib.h>
#include <string.h>

#include "common/rng.h"

static float *alloc_floats(size_t n) {
  if (n == 0) n = 1; // keep every pointer valid, even for an empty shard
  void *p = NULL;
  size_t bytes = (n * sizeof(float) + 63) & ~(size_t)63;
  if (posix_memalign(&p, 64, bytes) != 0) return NULL;
  memset(p, 0, bytes);
  return p;
}

int eng_model_alloc(eng_model *m, const eng_config *c, eng_err *e) {
  memset(m, 0, sizeof *m);
  m->cfg = *c;
  eng_layout_init(&m->lo, c);
  m->shards = calloc((size_t)m->lo.n_shards, sizeof *m->shards);
  if (!m->shards) return eng_err_set(e, ENG_ENOMEM, "cannot allocate the shard table");
  for (int s = 0; s < m->lo.n_shards; s++) {
    eng_shard *sh = &m->shards[s];
    sh->numel = eng_layout_shard_numel(&m->lo, s);
    sh->w = alloc_floats(sh->numel);
    sh->g = alloc_floats(sh->numel);
    sh->m = alloc_floats(sh->numel);
    sh->v = alloc_floats(sh->numel);
    if (!sh->w || !sh->g || !sh->m || !sh->v) {
      size_t bytes = eng_model_host_bytes(m);
      eng_model_free(m);
      return eng_err_set(e, ENG_ENOMEM, "cannot allocate %zu bytes of host model state", bytes);
    }
  }
  return 0;
}

void eng_model_free(eng_model *m) {
  if (m->shards) {
    for (int s = 0; s < m->lo.n_shards; s++) {
      free(m->shards[s].w);
      free(m->shards[s].g);
      free(m->shards[s].m);
      free(m->shards[s].v);
    }
  }
  free(m->shards);
  m->shards = NULL;
}

float *eng_model_tensor(eng_model *m, int s, const eng_tensor *t, char which) {
  float *base = which == 'g' ? m->shards[s].g : m->shards[s].w;
  return base + t->off;
}

typedef struct init_ctx {
  eng_model *m;
  uint64_t seed;
  uint64_t index;
} init_ctx;

static int init_tensor(void *ctx, int shard, const eng_tensor *t) {
  init_ctx *ic = ctx;
  float *p = eng_model_tensor(ic->m, shard, t, 'w');
  eng_rng r;
  eng_rng_seed(&r, ic->seed, ++ic->index);
  if (t->cols) {
    const double std = ic->m->cfg.init_std;
    for (size_t i = 0; i < t->numel; i++) p[i] = (float)(std * eng_rng_normal(&r));
  } else {
    // Vectors: norm weights start at 1, biases at 0 (bias names end in "bias").
    size_t len = strlen(t->name);
    float val = (len > 4 && strcmp(t->name + len - 4, "bias") == 0) ? 0.0f : 1.0f;
    for (size_t i = 0; i < t->numel; i++) p[i] = val;
  }
  return 0;
}

void eng_model_init_random(eng_model *m, uint64_t seed) {
  init_ctx ic = {m, seed, 0};
  eng_layout_visit(&m->lo, init_tensor, &ic);
}

size_t eng_model_host_bytes(const eng_model *m) {
  size_t n = 0;
  for (int s = 0; s < m->lo.n_shards; s++) n += m->shards ? m->shards[s].numel : 0;
  return n * 4 * sizeof(float);
}
