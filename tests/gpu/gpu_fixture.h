// Reading the transformers fixtures (tests/fixtures/<name>/) without the
// engine's JSON library, so the GPU tests build on a machine with only the
// CUDA toolkit and libc (tests/gpu/CMakeLists.txt). The safetensors header
// and config.json are searched for the keys the tests need; both files are
// ours and written by tests/ref/gen_fixtures.py, so a key scan is enough.
#ifndef TESTS_GPU_GPU_FIXTURE_H
#define TESTS_GPU_GPU_FIXTURE_H

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/bf16.h"
#include "model/config.h"

static inline const char *gfx_path(const char *fixture, const char *file) {
  static char buf[4][1024];
  static int k;
  char *p = buf[k++ & 3];
  snprintf(p, 1024, "%s/tests/fixtures/%s/%s", TRAIND_SOURCE_DIR, fixture, file);
  return p;
}

// The whole file in memory, NUL-terminated.
static inline char *gfx_slurp(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  CHECK(f, "cannot open %s", path);
  CHECK(fseek(f, 0, SEEK_END) == 0, "cannot seek %s", path);
  long n = ftell(f);
  CHECK(n >= 0, "cannot size %s", path);
  rewind(f);
  char *buf = malloc((size_t)n + 1);
  CHECK(buf && fread(buf, 1, (size_t)n, f) == (size_t)n, "cannot read %s", path);
  buf[n] = '\0';
  fclose(f);
  if (size) *size = (size_t)n;
  return buf;
}

// Where the value of "key" starts in json (after the colon and blanks), or NULL.
static inline const char *gfx_json_value(const char *json, const char *end, const char *key) {
  size_t kl = strlen(key);
  for (const char *p = json; p && p < end; p = strchr(p + 1, '"')) {
    if (p[0] != '"' || (size_t)(end - p) < kl + 2 || strncmp(p + 1, key, kl) != 0 || p[kl + 1] != '"') continue;
    const char *v = p + kl + 2;
    while (v < end && isspace((unsigned char)*v)) v++;
    if (v >= end || *v != ':') continue;
    v++;
    while (v < end && isspace((unsigned char)*v)) v++;
    return v;
  }
  return NULL;
}

typedef struct gfx_file {
  char *buf;
  size_t size;
  const char *hdr, *hdr_end; // the JSON header
  const unsigned char *data; // the data section
  char path[1024];
} gfx_file;

static inline void gfx_open(gfx_file *f, const char *path) {
  memset(f, 0, sizeof *f);
  snprintf(f->path, sizeof f->path, "%s", path);
  f->buf = gfx_slurp(path, &f->size);
  CHECK(f->size >= 8, "%s is too short for safetensors", path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = n << 8 | (unsigned char)f->buf[i];
  CHECK(n <= f->size - 8, "%s: header length %llu is past the end", path, (unsigned long long)n);
  f->hdr = f->buf + 8;
  f->hdr_end = f->hdr + n;
  f->data = (const unsigned char *)f->hdr_end;
}

static inline void gfx_close(gfx_file *f) {
  free(f->buf);
  memset(f, 0, sizeof *f);
}

typedef struct gfx_tensor {
  char dtype[8];
  int ndim;
  int64_t shape[8];
  size_t numel, begin, end;
} gfx_tensor;

// 1 and t filled when the file has tensor `name`.
static inline int gfx_find(const gfx_file *f, const char *name, gfx_tensor *t) {
  const char *v = gfx_json_value(f->hdr, f->hdr_end, name);
  if (!v || *v != '{') return 0;
  const char *close = memchr(v, '}', (size_t)(f->hdr_end - v));
  CHECK(close, "%s: tensor %s has no closing brace", f->path, name);
  const char *dt = gfx_json_value(v, close, "dtype"), *sh = gfx_json_value(v, close, "shape");
  const char *off = gfx_json_value(v, close, "data_offsets");
  CHECK(dt && sh && off && *dt == '"' && *sh == '[' && *off == '[', "%s: tensor %s is malformed", f->path, name);
  memset(t, 0, sizeof *t);
  for (int i = 0; i < 7 && dt[1 + i] != '"'; i++) t->dtype[i] = dt[1 + i];
  t->numel = 1;
  for (const char *p = sh + 1; *p != ']';) {
    char *q;
    unsigned long long d = strtoull(p, &q, 10);
    if (q == p) break;
    CHECK(t->ndim < 8, "%s: tensor %s has too many dimensions", f->path, name);
    t->shape[t->ndim++] = (int64_t)d;
    t->numel *= (size_t)d;
    p = q;
    while (*p == ',' || isspace((unsigned char)*p)) p++;
  }
  char *q;
  t->begin = (size_t)strtoull(off + 1, &q, 10);
  while (*q == ',' || isspace((unsigned char)*q)) q++;
  t->end = (size_t)strtoull(q, NULL, 10);
  CHECK(t->end >= t->begin && (size_t)(f->data - (const unsigned char *)f->buf) + t->end <= f->size,
        "%s: tensor %s lies outside the file", f->path, name);
  return 1;
}

// Tensor `name` (F32 or BF16) as malloc'd floats.
static inline float *gfx_f32(const gfx_file *f, const char *name, size_t *numel) {
  gfx_tensor t;
  CHECK(gfx_find(f, name, &t), "%s has no tensor %s", f->path, name);
  float *p = malloc(t.numel * sizeof(float) + 1);
  CHECK(p, "out of memory");
  const unsigned char *src = f->data + t.begin;
  if (!strcmp(t.dtype, "F32")) {
    CHECK(t.end - t.begin == t.numel * 4, "%s: %s has the wrong size", f->path, name);
    memcpy(p, src, t.numel * 4);
  } else if (!strcmp(t.dtype, "BF16")) {
    CHECK(t.end - t.begin == t.numel * 2, "%s: %s has the wrong size", f->path, name);
    for (size_t i = 0; i < t.numel; i++) p[i] = eng_bf16_to_f32((uint16_t)(src[2 * i] | src[2 * i + 1] << 8));
  } else {
    CHECK(0, "%s: %s is %s, not F32 or BF16", f->path, name, t.dtype);
  }
  if (numel) *numel = t.numel;
  return p;
}

// Tensor `name` (I32 or I64) as malloc'd int32.
static inline int32_t *gfx_i32(const gfx_file *f, const char *name, size_t *numel) {
  gfx_tensor t;
  CHECK(gfx_find(f, name, &t), "%s has no tensor %s", f->path, name);
  int32_t *p = malloc(t.numel * sizeof(int32_t) + 1);
  CHECK(p, "out of memory");
  const unsigned char *src = f->data + t.begin;
  if (!strcmp(t.dtype, "I32")) {
    memcpy(p, src, t.numel * 4);
  } else if (!strcmp(t.dtype, "I64")) {
    for (size_t i = 0; i < t.numel; i++) {
      int64_t v;
      memcpy(&v, src + 8 * i, 8);
      p[i] = (int32_t)v;
    }
  } else {
    CHECK(0, "%s: %s is %s, not I32 or I64", f->path, name, t.dtype);
  }
  if (numel) *numel = t.numel;
  return p;
}

// The number under "key" in json, or dflt.
static inline double gfx_json_num(const char *json, const char *end, const char *key, double dflt) {
  const char *v = gfx_json_value(json, end, key);
  return v && (isdigit((unsigned char)*v) || *v == '-') ? strtod(v, NULL) : dflt;
}

// The fields of config.json that eng_config needs (model/config.h).
static inline void gfx_config(const char *fixture, eng_config *c) {
  const char *path = gfx_path(fixture, "config.json");
  size_t n;
  char *js = gfx_slurp(path, &n);
  const char *end = js + n;
  memset(c, 0, sizeof *c);
  const char *mt = gfx_json_value(js, end, "model_type");
  CHECK(mt && *mt == '"', "%s has no model_type", path);
  c->arch = !strncmp(mt, "\"qwen3\"", 7) ? ENG_ARCH_QWEN3 : !strncmp(mt, "\"qwen2\"", 7) ? ENG_ARCH_QWEN2 : ENG_ARCH_LLAMA;
  c->vocab = (int)gfx_json_num(js, end, "vocab_size", 0);
  c->d_model = (int)gfx_json_num(js, end, "hidden_size", 0);
  c->n_layers = (int)gfx_json_num(js, end, "num_hidden_layers", 0);
  c->n_heads = (int)gfx_json_num(js, end, "num_attention_heads", 0);
  c->n_kv_heads = (int)gfx_json_num(js, end, "num_key_value_heads", c->n_heads);
  c->head_dim = (int)gfx_json_num(js, end, "head_dim", c->n_heads ? c->d_model / c->n_heads : 0);
  c->d_ff = (int)gfx_json_num(js, end, "intermediate_size", 0);
  c->max_pos = (int)gfx_json_num(js, end, "max_position_embeddings", 0);
  c->rope_theta = (float)gfx_json_num(js, end, "rope_theta", 10000.0);
  c->rms_eps = (float)gfx_json_num(js, end, "rms_norm_eps", 1e-6);
  const char *tie = gfx_json_value(js, end, "tie_word_embeddings");
  c->tie_embeddings = tie && !strncmp(tie, "true", 4);
  c->qkv_bias = c->arch == ENG_ARCH_QWEN2;
  c->qk_norm = c->arch == ENG_ARCH_QWEN3;
  CHECK(c->vocab > 0 && c->d_model > 0 && c->n_layers > 0 && c->n_heads > 0 && c->d_ff > 0, "%s is incomplete", path);
  free(js);
}

#endif
