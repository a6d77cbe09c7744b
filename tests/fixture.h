// Reading the transformers reference fixtures (tests/ref/gen_fixtures.py)
// from tests: tensors of ref.safetensors as malloc'd arrays, and the
// max|Δ|/max|ref| measure every parity check uses.
#ifndef TESTS_FIXTURE_H
#define TESTS_FIXTURE_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "engine.h"
#include "model/safetensors.h"

static inline const char *fx_dir(const char *name) {
  static char buf[4][1024];
  static int k;
  char *p = buf[k++ & 3];
  snprintf(p, 1024, "%s/tests/fixtures/%s", TRAIND_SOURCE_DIR, name);
  return p;
}

// A run of the model in dir for tests of export: batch × seq tokens, lr 1e-3,
// the defaults otherwise, a 64 MiB arena.
static inline eng_run *fx_run_open(const char *dir, int batch, int seq) {
  eng_spec s;
  eng_spec_defaults(&s);
  s.model_dir = dir;
  s.batch = batch;
  s.seq_len = seq;
  s.lr = 1e-3f;
  s.device_cap = (size_t)64 << 20;
  eng_err e = {0};
  eng_run *r;
  CHECK_OK(eng_open(&s, &r, &e), &e);
  return r;
}

static inline void fx_open(eng_st_file *f, const char *fixture) {
  char path[1200];
  eng_err e = {0};
  snprintf(path, sizeof path, "%s/ref.safetensors", fx_dir(fixture));
  CHECK_OK(eng_st_open(f, NULL, path, &e), &e);
}

static inline float *fx_f32(const eng_st_file *f, const char *name, size_t *numel) {
  const eng_st_tensor *t = eng_st_find(f, name);
  CHECK(t, "fixture %s has no tensor %s", f->path, name);
  float *p = malloc(t->numel * sizeof(float));
  eng_err e = {0};
  CHECK_OK(eng_st_read_f32(f, t, p, &e), &e);
  if (numel) *numel = t->numel;
  return p;
}

static inline int32_t *fx_i32(const eng_st_file *f, const char *name, size_t *numel) {
  const eng_st_tensor *t = eng_st_find(f, name);
  CHECK(t, "fixture %s has no tensor %s", f->path, name);
  int32_t *p = malloc(t->numel * sizeof(int32_t));
  eng_err e = {0};
  CHECK_OK(eng_st_read_i32(f, t, p, &e), &e);
  if (numel) *numel = t->numel;
  return p;
}

// The models of the POET-X fixtures (tests/fixtures/poet_layers: their
// transformers fixtures under POET-X; tests/ref/gen_poet_fixtures.py's MODELS).
static const char *const fx_poet_models[] = {"llama_tied", "qwen2", "qwen3"};
enum { FX_POET_MODELS = sizeof fx_poet_models / sizeof fx_poet_models[0] };

// max|a - ref| / max|ref|, in double.
static inline double fx_rel(const float *a, const float *ref, size_t n) {
  double md = 0, mr = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - ref[i]), r = fabs((double)ref[i]);
    if (!(d <= md)) md = d; // NaN propagates
    if (r > mr) mr = r;
  }
  return mr > 0 ? md / mr : md;
}

#endif
