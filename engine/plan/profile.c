// Profile files: one table names every field, its type and whether a full
// profile must have it, so load, merge and save cannot disagree.
#include "plan/profile.h"

#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/json_kind.h"
#include "model/atomic_file.h"

typedef enum { F_STR, F_DBL, F_INT } ftype;

static const struct field {
  const char *key;
  size_t off;
  ftype type;
  size_t len; // F_STR: buffer size; F_INT: the largest value
  int optional;
} fields[] = {
#define S(k) {#k, offsetof(eng_profile, k), F_STR, sizeof(((eng_profile *)0)->k), 0}
#define D(k, o) {#k, offsetof(eng_profile, k), F_DBL, 0, o}
#define I(k) {#k, offsetof(eng_profile, k), F_INT, 64, 0}
#define IO(k, max) {#k, offsetof(eng_profile, k), F_INT, max, 1}
    S(name), S(backend),
    D(gemm_flops, 0), D(gemm_bwd_flops, 1), D(gemm_half_rows, 1), D(attn_flops, 0),
    D(attn_bwd_flops, 1), D(elem_bytes_per_s, 0),
    D(h2d, 0), D(d2h, 0), D(nvme_read, 0), D(nvme_write, 0),
    D(opt_params_per_s, 0), I(opt_inline),
    I(act_bytes), I(weight_bytes), I(grad_bytes), I(grad_store_bytes), I(pinned_copy), I(opt_8bit),
    IO(poet_block, 65536), IO(poet_fast, 1), IO(poet_merge_every, 1 << 30), IO(poet_base_bf16, 1), D(poet_flops, 1),
    IO(ranks, 1 << 20), D(comm_bps, 1), D(comm_latency, 1),
    D(device_bytes, 0), D(device_reserve, 0), D(host_bytes, 0), D(host_reserve, 0),
    D(nvme_bytes, 0), D(device_act_bytes, 1), D(host_act_bytes, 1),
#undef S
#undef D
#undef I
#undef IO
};
enum { N_FIELDS = sizeof fields / sizeof fields[0] };

static const struct field *field_find(const char *key) {
  for (int i = 0; i < N_FIELDS; i++)
    if (!strcmp(fields[i].key, key)) return &fields[i];
  return NULL;
}

static int field_set(eng_profile *p, const struct field *f, const json_t *v, const char *path,
                     eng_err *e) {
  char *dst = (char *)p + f->off;
  switch (f->type) {
  case F_STR:
    if (!json_is_string(v))
      return eng_err_set(e, ENG_EINVAL, "%s: field \"%s\" must be a string, got %s", path, f->key,
                         eng_json_kind(v));
    if (strlen(json_string_value(v)) >= f->len)
      return eng_err_set(e, ENG_EINVAL, "%s: field \"%s\" is longer than %zu characters", path,
                         f->key, f->len - 1);
    strcpy(dst, json_string_value(v));
    return 0;
  case F_DBL:
    if (!json_is_number(v))
      return eng_err_set(e, ENG_EINVAL, "%s: field \"%s\" must be a number, got %s", path, f->key,
                         eng_json_kind(v));
    *(double *)dst = json_number_value(v);
    return 0;
  case F_INT:
    if (json_is_boolean(v)) {
      *(int *)dst = json_is_true(v);
      return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > (json_int_t)f->len)
      return eng_err_set(e, ENG_EINVAL, "%s: field \"%s\" must be an integer from 0 to %zu or a boolean", path,
                         f->key, f->len);
    *(int *)dst = (int)json_integer_value(v);
    return 0;
  }
  return 0;
}

// Applies every key of the object at `path` to p; `seen` (may be NULL)
// records which fields were present.
static int apply_file(eng_profile *p, const char *path, int *seen, eng_err *e) {
  json_error_t je;
  json_t *root = json_load_file(path, 0, &je);
  if (!root) return eng_err_set(e, ENG_EINVAL, "%s: line %d: %s", path, je.line, je.text);
  int rc = 0;
  if (!json_is_object(root)) {
    rc = eng_err_set(e, ENG_EINVAL, "%s: a profile must be a JSON object, got %s", path, eng_json_kind(root));
    goto out;
  }
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    if (!strcmp(key, "sources") || !strcmp(key, "note")) continue;
    const struct field *f = field_find(key);
    if (!f) {
      rc = eng_err_set(e, ENG_EINVAL, "%s: unknown field \"%s\"", path, key);
      goto out;
    }
    if ((rc = field_set(p, f, v, path, e))) goto out;
    if (seen) seen[f - fields] = 1;
  }
out:
  json_decref(root);
  return rc;
}

int eng_profile_load(const char *path, eng_profile *p, eng_err *e) {
  eng_profile tmp;
  memset(&tmp, 0, sizeof tmp);
  int seen[N_FIELDS] = {0};
  int rc = apply_file(&tmp, path, seen, e);
  if (rc) return rc;
  for (int i = 0; i < N_FIELDS; i++)
    if (!seen[i] && !fields[i].optional)
      return eng_err_set(e, ENG_EINVAL, "%s: field \"%s\" is missing", path, fields[i].key);
  if ((rc = eng_profile_validate(&tmp, path, e))) return rc;
  *p = tmp;
  return 0;
}

int eng_profile_merge_file(eng_profile *p, const char *path, eng_err *e) {
  eng_profile tmp = *p;
  int rc = apply_file(&tmp, path, NULL, e);
  if (rc) return rc;
  if ((rc = eng_profile_validate(&tmp, path, e))) return rc;
  *p = tmp;
  return 0;
}

int eng_profile_validate(const eng_profile *p, const char *what, eng_err *e) {
  const struct {
    const char *key;
    double v;
  } pos[] = {{"gemm_flops", p->gemm_flops}, {"attn_flops", p->attn_flops},
             {"elem_bytes_per_s", p->elem_bytes_per_s}, {"h2d", p->h2d}, {"d2h", p->d2h},
             {"nvme_read", p->nvme_read}, {"nvme_write", p->nvme_write},
             {"opt_params_per_s", p->opt_params_per_s}, {"device_bytes", p->device_bytes},
             {"host_bytes", p->host_bytes}};
  for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
    if (!(pos[i].v > 0) || !isfinite(pos[i].v))
      return eng_err_set(e, ENG_EINVAL, "%s: field \"%s\" must be a positive number", what, pos[i].key);
  const struct {
    const char *key;
    double v;
  } nonneg[] = {{"gemm_bwd_flops", p->gemm_bwd_flops}, {"gemm_half_rows", p->gemm_half_rows},
                {"attn_bwd_flops", p->attn_bwd_flops}, {"device_reserve", p->device_reserve},
                {"host_reserve", p->host_reserve}, {"nvme_bytes", p->nvme_bytes},
                {"device_act_bytes", p->device_act_bytes}, {"host_act_bytes", p->host_act_bytes},
                {"poet_flops", p->poet_flops}, {"comm_bps", p->comm_bps},
                {"comm_latency", p->comm_latency}};
  for (size_t i = 0; i < sizeof nonneg / sizeof nonneg[0]; i++)
    if (!(nonneg[i].v >= 0) || !isfinite(nonneg[i].v))
      return eng_err_set(e, ENG_EINVAL, "%s: field \"%s\" must be a non-negative number", what, nonneg[i].key);
  const struct {
    const char *key;
    int v;
  } bytes[] = {{"act_bytes", p->act_bytes}, {"weight_bytes", p->weight_bytes},
               {"grad_bytes", p->grad_bytes}, {"grad_store_bytes", p->grad_store_bytes}};
  for (size_t i = 0; i < sizeof bytes / sizeof bytes[0]; i++)
    if (bytes[i].v != 2 && bytes[i].v != 4)
      return eng_err_set(e, ENG_EINVAL, "%s: field \"%s\" must be 2 (bf16) or 4 (fp32), got %d", what,
                         bytes[i].key, bytes[i].v);
  if (p->device_reserve >= p->device_bytes)
    return eng_err_set(e, ENG_EINVAL, "%s: device_reserve (%.0f) leaves no device memory of %.0f", what,
                       p->device_reserve, p->device_bytes);
  if (p->host_reserve >= p->host_bytes)
    return eng_err_set(e, ENG_EINVAL, "%s: host_reserve (%.0f) leaves no host memory of %.0f", what,
                       p->host_reserve, p->host_bytes);
  if (p->ranks > 1 && !(p->comm_bps > 0))
    return eng_err_set(e, ENG_EINVAL, "%s: %d ranks need comm_bps, the rate of their all-reduce", what, p->ranks);
  if (strcmp(p->backend, "cuda") && strcmp(p->backend, "cpu"))
    return eng_err_set(e, ENG_EINVAL, "%s: field \"backend\" must be \"cuda\" or \"cpu\", got \"%s\"", what,
                       p->backend);
  return 0;
}

int eng_profile_save(const eng_profile *p, const char *path, const char *note, eng_err *e) {
  json_t *root = json_object();
  if (note) json_object_set_new(root, "note", json_string(note));
  for (int i = 0; i < N_FIELDS; i++) {
    const struct field *f = &fields[i];
    const char *src = (const char *)p + f->off;
    json_t *v = f->type == F_STR ? json_string(src)
              : f->type == F_DBL ? json_real(*(const double *)src)
                                 : json_integer(*(const int *)src);
    json_object_set_new(root, f->key, v);
  }
  char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
  json_decref(root);
  if (!text) return eng_err_set(e, ENG_ENOMEM, "cannot format the profile for %s", path);
  size_t n = strlen(text);
  text[n] = '\n'; // json_dumps leaves room for the NUL only: write the newline in its place
  int rc = eng_afile_write_all(path, text, n + 1, e);
  free(text);
  return rc;
}

void eng_profile_set_nvme(eng_profile *p, double read_bytes_per_s, double write_bytes_per_s,
                          double free_bytes) {
  p->nvme_read = read_bytes_per_s;
  p->nvme_write = write_bytes_per_s;
  p->nvme_bytes = free_bytes;
}
