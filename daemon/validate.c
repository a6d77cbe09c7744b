#define _GNU_SOURCE // O_PATH, AT_EMPTY_PATH
#include "validate.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "compute/scaling.h"
#include "compute/select.h"
#include "model/rope.h"

#define T(x) Traind__V1__##x   // types
#define K(x) TRAIND__V1__##x   // constants

static int bad(val_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(val_err *e, const char *fmt, ...) {
  e->code = GRPC_STATUS_INVALID_ARGUMENT;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  va_end(ap);
  return -1;
}

// ---- the whole message -----------------------------------------------------------

static int utf8_ok(const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  while (*p) {
    if (*p < 0x80) {
      p++;
      continue;
    }
    int n = (*p & 0xe0) == 0xc0 ? 1 : (*p & 0xf0) == 0xe0 ? 2 : (*p & 0xf8) == 0xf0 ? 3 : -1;
    if (n < 0) return 0;
    uint32_t cp = *p & (0x3f >> n);
    for (int i = 1; i <= n; i++) {
      if ((p[i] & 0xc0) != 0x80) return 0;
      cp = cp << 6 | (p[i] & 0x3f);
    }
    // Overlong forms, surrogates and code points past U+10FFFF are not UTF-8.
    static const uint32_t min[] = {0, 0x80, 0x800, 0x10000};
    if (cp < min[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    p += n + 1;
  }
  return 1;
}

// The fields a check descended through, innermost first: the path is only
// spelled out for an error, so a clean request costs no formatting.
typedef struct field_path {
  const struct field_path *up;
  const char *name;
  long index; // of a repeated field's element, else -1
} field_path;

static size_t field_path_fmt(const field_path *w, char *out, size_t n) {
  size_t k = w->up ? field_path_fmt(w->up, out, n) : 0;
  int m = w->index >= 0 ? snprintf(out + k, n - k, "%s%s[%ld]", k ? "." : "", w->name, w->index)
                        : snprintf(out + k, n - k, "%s%s", k ? "." : "", w->name);
  return m < 0 ? k : k + (size_t)m < n ? k + (size_t)m : n - 1;
}

static int field_bad(val_err *e, const field_path *w, const char *what) {
  char name[512] = "";
  if (w) field_path_fmt(w, name, sizeof name);
  return bad(e, "%s: %s", name, what);
}

static int message_scan(const ProtobufCMessage *m, const field_path *path, val_err *e) {
  const ProtobufCMessageDescriptor *d = m->descriptor;
  if (m->n_unknown_fields) {
    char what[256];
    snprintf(what, sizeof what, "field number %u is not part of %s", m->unknown_fields[0].tag, d->name);
    return field_bad(e, path, what);
  }
  for (unsigned i = 0; i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &d->fields[i];
    if (f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_MESSAGE) continue;
    const char *base = (const char *)m + f->offset;
    size_t n = 1;
    const void *const *items = (const void *const *)base;
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
      n = *(const size_t *)((const char *)m + f->quantifier_offset);
      items = *(const void *const *const *)base;
    } else if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
      if (*(const uint32_t *)((const char *)m + f->quantifier_offset) != f->id) continue;
    }
    for (size_t k = 0; k < n; k++) {
      const void *v = items[k];
      if (!v) continue;
      field_path sub = {path, f->name, f->label == PROTOBUF_C_LABEL_REPEATED ? (long)k : -1};
      if (f->type == PROTOBUF_C_TYPE_STRING && !utf8_ok(v)) return field_bad(e, &sub, "not valid UTF-8");
      if (f->type == PROTOBUF_C_TYPE_MESSAGE && message_scan(v, &sub, e)) return -1;
    }
  }
  return 0;
}

int val_message(const ProtobufCMessage *m, const char *path, val_err *e) {
  field_path root = {NULL, path, -1};
  return message_scan(m, *path ? &root : NULL, e);
}

// ---- the bytes on the wire -----------------------------------------------------------

// A varint at *p (below end); -1 when the bytes end first or it is too long.
static int wire_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
  *v = 0;
  for (int shift = 0; shift < 64 && *p < end; shift += 7) {
    uint8_t b = *(*p)++;
    *v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) return 0;
  }
  return -1;
}

static int wire_scan(const ProtobufCMessageDescriptor *d, const uint8_t *p, const uint8_t *end, const field_path *path,
                     int depth, val_err *e) {
  // Deeper than any message of ours nests: the decoder judges the rest.
  while (p < end && depth < 32) {
    uint64_t tag, v;
    if (wire_varint(&p, end, &tag)) return 0;
    switch (tag & 7) {
    case 0:
      if (wire_varint(&p, end, &v)) return 0;
      continue;
    case 1:
    case 5: {
      size_t k = (tag & 7) == 1 ? 8 : 4;
      if ((size_t)(end - p) < k) return 0;
      p += k;
      continue;
    }
    case 2: break;
    default: return 0; // groups, or not protobuf: the decoder refuses it
    }
    if (wire_varint(&p, end, &v) || v > (uint64_t)(end - p)) return 0;
    const ProtobufCFieldDescriptor *f =
        tag >> 3 <= UINT32_MAX ? protobuf_c_message_descriptor_get_field(d, (unsigned)(tag >> 3)) : NULL;
    field_path sub = {path, f ? f->name : "", -1};
    const uint8_t *nul = f && f->type == PROTOBUF_C_TYPE_STRING ? memchr(p, 0, v) : NULL;
    if (nul) {
      char what[128];
      snprintf(what, sizeof what, "contains a NUL byte (at byte %zu of %llu)", (size_t)(nul - p), (unsigned long long)v);
      return field_bad(e, &sub, what);
    }
    if (f && f->type == PROTOBUF_C_TYPE_MESSAGE && wire_scan(f->descriptor, p, p + v, &sub, depth + 1, e)) return -1;
    p += v;
  }
  return 0;
}

int val_wire(const ProtobufCMessageDescriptor *d, const void *buf, size_t n, val_err *e) {
  return wire_scan(d, buf, (const uint8_t *)buf + n, NULL, 0, e);
}

// ---- fields --------------------------------------------------------------------------

int val_id(const char *s, const char *field, val_err *e) {
  size_t n = strlen(s);
  if (n == 0) return bad(e, "%s: required", field);
  if (n > 64) return bad(e, "%s: longer than 64 bytes (%zu)", field, n);
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
          c == '-'))
      return bad(e, "%s: byte %zu is not one of [A-Za-z0-9._-]", field, i);
  }
  return 0;
}

static int range(int64_t v, int64_t lo, int64_t hi, const char *path, const char *name, val_err *e) {
  if (v < lo || v > hi)
    return bad(e, "%s.%s: must be in [%lld, %lld] (got %lld)", path, name, (long long)lo, (long long)hi, (long long)v);
  return 0;
}

// lo_open: the lower bound itself is not allowed.
static int frange(double v, double lo, double hi, int lo_open, const char *path, const char *name, val_err *e) {
  if (!isfinite(v) || v < lo || v > hi || (lo_open && v == lo))
    return bad(e, "%s.%s: must be a number in %c%g, %g] (got %g)", path, name, lo_open ? '(' : '[', lo, hi, v);
  return 0;
}

static int enum_known(int v, const ProtobufCEnumDescriptor *d, const char *path, const char *name, val_err *e) {
  if (!protobuf_c_enum_descriptor_get_value(d, v))
    return bad(e, "%s.%s: %d is not a value of %s", path, name, v, d->name);
  return 0;
}

// The canonical path of what fd names (as realpath gives it), from
// /proc/self/fd; NULL without /proc. One path walk by the kernel, where
// realpath reads every component's link again (a tenth of the loop's time
// under api.sh).
static char *fd_path(int fd) {
  char link[64], buf[PATH_MAX];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, buf, sizeof buf - 1);
  if (n <= 0 || buf[0] != '/') return NULL;
  buf[n] = 0;
  return strdup(buf);
}

// An absolute path without ".", ".." or empty components and no "/" at the
// end: one that is its own canonical form unless a symlink is on the way.
static int path_plain(const char *p) {
  for (const char *c = p; *c == '/';) {
    const char *end = strchrnul(c + 1, '/');
    size_t n = (size_t)(end - c - 1);
    if (n == 0 || (n == 1 && c[1] == '.') || (n == 2 && c[1] == '.' && c[2] == '.')) return 0;
    c = end;
  }
  return 1;
}

// Opens path with O_PATH (nothing is read, a FIFO does not block, no
// permission is needed beyond the directories' search bits) and gives its
// canonical form in *r (NULL when it cannot be had). A plain path that
// opens with no symlink on the way (openat2 RESOLVE_NO_SYMLINKS) is its own
// canonical form: no readlink of /proc for the common case.
static int open_canonical(const char *path, char **r) {
  *r = NULL;
  if (path_plain(path)) {
    struct open_how how = {.flags = O_PATH | O_CLOEXEC, .resolve = RESOLVE_NO_SYMLINKS};
    int fd = (int)syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof how);
    if (fd >= 0) {
      *r = strdup(path);
      return fd;
    } // a symlink on the way (ELOOP), no openat2 (ENOSYS), absent: the general way
  }
  int fd = open(path, O_PATH | O_CLOEXEC);
  if (fd >= 0 && !(*r = fd_path(fd))) *r = realpath(path, NULL);
  return fd;
}

int val_path(const char *path, const char *field, int dir, const val_roots *roots, char **resolved, val_err *e) {
  *resolved = NULL;
  if (!*path) return bad(e, "%s: required", field);
  if (path[0] != '/') return bad(e, "%s: \"%s\" is not an absolute path", field, path);
  if (strlen(path) >= PATH_MAX) return bad(e, "%s: longer than %d bytes", field, PATH_MAX - 1);
  char *r;
  int fd = open_canonical(path, &r);
  int under = 0;
  for (int i = 0; r && i < roots->n && !under; i++) {
    size_t n = strlen(roots->dirs[i]);
    // "/" as a root holds everything; otherwise a whole path component must match.
    under = !strcmp(roots->dirs[i], "/") ||
            (!strncmp(r, roots->dirs[i], n) && (r[n] == '/' || r[n] == 0));
  }
  struct stat st;
  // Absent, outside the roots (also through a symlink), unreadable: one
  // answer, so that a job's errors tell nothing about the rest of the
  // filesystem. Only a path that may be read is described further.
  int ok = under && !fstat(fd, &st) && !faccessat(fd, "", dir ? R_OK | X_OK : R_OK, AT_EMPTY_PATH);
  if (fd >= 0) close(fd);
  if (!ok) {
    bad(e, "%s: " ENG_FS_NOT_THERE ": %s", field, path);
    free(r);
    return -1;
  }
  if (dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)) {
    bad(e, "%s: %s is not a %s", field, path, dir ? "directory" : "regular file");
    free(r);
    return -1;
  }
  *resolved = r;
  return 0;
}

static int resolvable(const char *field, const char *name, int dir, const val_roots *roots, val_err *e) {
  char *r;
  if (val_path(field, name, dir, roots, &r, e)) return -1;
  free(r);
  return 0;
}

// ---- the spec ----------------------------------------------------------------------------

static int val_model_config(const T(ModelConfig) *c, const char *p, val_err *e) {
  if (c->arch == 0) return bad(e, "%s.arch: required (ARCH_LLAMA, ARCH_QWEN2, ARCH_QWEN3, ARCH_QWEN3_5 or ARCH_MISTRAL)", p);
  if (enum_known(c->arch, &traind__v1__arch__descriptor, p, "arch", e)) return -1;
  if (range(c->vocab_size, 1, 1 << 24, p, "vocab_size", e) || range(c->hidden_size, 1, 1 << 16, p, "hidden_size", e) ||
      range(c->num_hidden_layers, 1, 1024, p, "num_hidden_layers", e) ||
      range(c->num_attention_heads, 1, 1024, p, "num_attention_heads", e) ||
      range(c->num_key_value_heads, 0, c->num_attention_heads, p, "num_key_value_heads", e) ||
      range(c->head_dim, 0, 4096, p, "head_dim", e) ||
      range(c->intermediate_size, 1, 1 << 20, p, "intermediate_size", e) ||
      range(c->max_position_embeddings, 0, 1 << 24, p, "max_position_embeddings", e) ||
      frange(c->rope_theta, 0, 1e12, 0, p, "rope_theta", e) || frange(c->rms_norm_eps, 0, 1, 0, p, "rms_norm_eps", e) ||
      frange(c->initializer_range, 0, 1, 0, p, "initializer_range", e) ||
      range(c->sliding_window, 0, 1 << 24, p, "sliding_window", e))
    return -1;
  if (c->num_key_value_heads && c->num_attention_heads % c->num_key_value_heads)
    return bad(e, "%s.num_key_value_heads: %d does not divide num_attention_heads (%d)", p, c->num_key_value_heads,
               c->num_attention_heads);
  if (!c->head_dim && c->hidden_size % c->num_attention_heads)
    return bad(e, "%s.head_dim: required when num_attention_heads (%d) does not divide hidden_size (%d)", p,
               c->num_attention_heads, c->hidden_size);
  if (c->multimodal)
    return bad(e, "%s.multimodal: a model made from a config has no vision tower to carry; give model.hf_dir", p);
  if (c->rope_type && *c->rope_type && eng_rope_find(c->rope_type) < 0)
    return bad(e, "%s.rope_type: \"%s\" is not one of default, linear, llama3, yarn", p, c->rope_type);
  return 0;
}

static int val_model(const T(ModelSpec) *m, const char *p, const val_roots *roots, val_err *e) {
  char sub[256];
  switch (m->source_case) {
  case K(MODEL_SPEC__SOURCE_HF_DIR):
    snprintf(sub, sizeof sub, "%s.hf_dir", p);
    return resolvable(m->hf_dir, sub, 1, roots, e);
  case K(MODEL_SPEC__SOURCE_CONFIG):
    snprintf(sub, sizeof sub, "%s.config", p);
    return val_model_config(m->config, sub, e);
  default: return bad(e, "%s: set either hf_dir or config", p);
  }
}

static int val_data(const T(DataSpec) *d, const char *p, const val_roots *roots, val_err *e) {
  char sub[256];
  snprintf(sub, sizeof sub, "%s.train_path", p);
  if (resolvable(d->train_path, sub, 0, roots, e)) return -1;
  if (*d->eval_path) {
    snprintf(sub, sizeof sub, "%s.eval_path", p);
    if (resolvable(d->eval_path, sub, 0, roots, e)) return -1;
  }
  if (range(d->eval_every, 0, 1000000000, p, "eval_every", e) || range(d->eval_batches, 0, 10000, p, "eval_batches", e))
    return -1;
  if (d->eval_every && !*d->eval_path) return bad(e, "%s.eval_every: needs eval_path", p);
  if (range((int64_t)d->format, 0, 4, p, "format", e)) return -1;
  if (*d->chat_template && strcmp(d->chat_template, "chatml") && strcmp(d->chat_template, "llama3"))
    return bad(e, "%s.chat_template: must be \"chatml\" or \"llama3\" (or empty, to recognise the model's)", p);
  return 0;
}

static int val_training(const T(TrainingSpec) *t, const char *p, val_err *e) {
  switch (t->budget_case) {
  case K(TRAINING_SPEC__BUDGET_STEPS):
    if (range(t->steps, 1, 1000000000, p, "steps", e)) return -1;
    break;
  case K(TRAINING_SPEC__BUDGET_TOKENS):
    if (range(t->tokens, 1, INT64_C(1) << 50, p, "tokens", e)) return -1;
    break;
  default: return bad(e, "%s: set either steps or tokens", p);
  }
  if (range(t->batch_size, 1, 65536, p, "batch_size", e) || range(t->seq_len, 1, 1 << 20, p, "seq_len", e) ||
      range(t->micro_batches, 0, t->batch_size, p, "micro_batches", e) ||
      enum_known(t->optimizer, &traind__v1__optimizer__descriptor, p, "optimizer", e) ||
      enum_known(t->schedule, &traind__v1__lr_schedule__descriptor, p, "schedule", e) ||
      frange(t->lr, 0, 10, 1, p, "lr", e) || (t->min_lr_opt_case && frange(t->min_lr, 0, t->lr, 0, p, "min_lr", e)) ||
      range(t->warmup_steps, 0, 1000000000, p, "warmup_steps", e))
    return -1;
  if (t->micro_batches && t->batch_size % t->micro_batches)
    return bad(e, "%s.micro_batches: %d does not divide batch_size (%d)", p, t->micro_batches, t->batch_size);
  if (t->budget_case == K(TRAINING_SPEC__BUDGET_TOKENS) && t->tokens / t->batch_size / t->seq_len > 1000000000)
    return bad(e, "%s.tokens: more than 1e9 steps at this batch_size and seq_len", p);
  if ((t->beta1_opt_case && frange(t->beta1, 0, 1, 0, p, "beta1", e)) ||
      (t->beta2_opt_case && frange(t->beta2, 0, 1, 0, p, "beta2", e)) ||
      (t->eps_opt_case && frange(t->eps, 0, 1, 1, p, "eps", e)) ||
      (t->weight_decay_opt_case && frange(t->weight_decay, 0, 10, 0, p, "weight_decay", e)) ||
      (t->clip_opt_case && frange(t->clip_norm, 0, 1e6, 0, p, "clip_norm", e)))
    return -1;
  if (enum_known(t->method, &traind__v1__method__descriptor, p, "method", e)) return -1;
  if (t->poet) {
    char sub[256];
    snprintf(sub, sizeof sub, "%s.poet", p);
    if (t->method != K(METHOD__METHOD_POETX)) return bad(e, "%s: set only with method poetx", sub);
    if (range(t->poet->block_size, 0, 4096, sub, "block_size", e) || range(t->poet->merge_every, 0, 1000000000, sub,
        "merge_every", e) || (t->poet->lr_opt_case && frange(t->poet->lr, 0, 10, 0, sub, "lr", e)))
      return -1;
    if (t->poet->block_size == 1) return bad(e, "%s.block_size: must be at least 2 (got 1)", sub);
  }
  // beta = 1 never forgets and makes the bias correction divide by zero.
  if ((t->beta1_opt_case && t->beta1 >= 1) || (t->beta2_opt_case && t->beta2 >= 1))
    return bad(e, "%s.%s: must be below 1 (got %g)", p, t->beta1_opt_case && t->beta1 >= 1 ? "beta1" : "beta2",
               t->beta1_opt_case && t->beta1 >= 1 ? t->beta1 : t->beta2);
  return 0;
}

static int val_select(const T(SelectSpec) *s, const char *p, const val_roots *roots, val_err *e) {
  if (*s->rule && eng_select_rule_parse(s->rule) < 0)
    return bad(e, "%s.rule: \"%s\" is not one of none, loss, reducible, dynamics", p, s->rule);
  char sub[256];
  if (*s->reference_dir) {
    snprintf(sub, sizeof sub, "%s.reference_dir", p);
    if (resolvable(s->reference_dir, sub, 1, roots, e)) return -1;
  }
  if (*s->band_file) {
    snprintf(sub, sizeof sub, "%s.band_file", p);
    if (resolvable(s->band_file, sub, 0, roots, e)) return -1;
  }
  return 0; // ranges and combinations: the engine's (eng_select_validate, spec.c)
}

static int val_checkpoints(const T(CheckpointSpec) *c, const char *p, val_err *e) {
  return range(c->every_steps, 0, 1000000000, p, "every_steps", e) || range(c->keep, 0, 1000, p, "keep", e) ? -1 : 0;
}

static int val_device(const T(DeviceSpec) *d, const char *p, val_err *e) {
  if (d->target_case == K(DEVICE_SPEC__TARGET_CPU) && !d->cpu)
    return bad(e, "%s.cpu: set it to true, or set gpu, or leave the target empty", p);
  if (d->target_case == K(DEVICE_SPEC__TARGET_GPU) && range(d->gpu, 0, 63, p, "gpu", e)) return -1;
  if (range(d->memory_bytes, 0, INT64_C(1) << 50, p, "memory_bytes", e) ||
      range(d->recompute_every, 0, 1024, p, "recompute_every", e) ||
      enum_known(d->boundaries, &traind__v1__placement__descriptor, p, "boundaries", e))
    return -1;
  if (d->memory_bytes && d->memory_bytes < (1 << 20))
    return bad(e, "%s.memory_bytes: at least 1 MiB, or 0 for the default (got %lld)", p, (long long)d->memory_bytes);
  return 0;
}

int val_spec(const T(JobSpec) *s, const char *p, const val_roots *roots, val_err *e) {
  char sub[128];
  if (!s) return bad(e, "%s: required", p);
  if (strlen(s->name) > 128) return bad(e, "%s.name: longer than 128 bytes", p);
  for (const char *c = s->name; *c; c++)
    if ((unsigned char)*c < 0x20 || *c == 0x7f) return bad(e, "%s.name: control characters are not allowed", p);
  if (!s->model) return bad(e, "%s.model: required", p);
  snprintf(sub, sizeof sub, "%s.model", p);
  if (val_model(s->model, sub, roots, e)) return -1;
  if (!s->data) return bad(e, "%s.data: required", p);
  snprintf(sub, sizeof sub, "%s.data", p);
  if (val_data(s->data, sub, roots, e)) return -1;
  // Chat is rendered by the model directory's tokenizer and template.
  int chat = s->data->format == K(DATA_FORMAT__DATA_FORMAT_CHAT);
  if ((chat || *s->data->chat_template) && s->model->source_case != K(MODEL_SPEC__SOURCE_HF_DIR))
    return bad(e, "%s.data.%s: chat data needs model.hf_dir (its tokenizer.json and chat template)", p,
               chat ? "format" : "chat_template");
  if (!s->training) return bad(e, "%s.training: required", p);
  snprintf(sub, sizeof sub, "%s.training", p);
  if (val_training(s->training, sub, e)) return -1;
  snprintf(sub, sizeof sub, "%s.checkpoints", p);
  if (s->checkpoints && val_checkpoints(s->checkpoints, sub, e)) return -1;
  snprintf(sub, sizeof sub, "%s.select", p);
  if (s->select && val_select(s->select, sub, roots, e)) return -1;
  snprintf(sub, sizeof sub, "%s.device", p);
  if (s->device && val_device(s->device, sub, e)) return -1;
  return 0;
}

// ---- requests --------------------------------------------------------------------------

int val_submit_head(const T(SubmitJobRequest) *r, val_err *e) {
  if (val_message(&r->base, "", e)) return -1;
  return *r->request_id ? val_id(r->request_id, "request_id", e) : 0;
}

int val_submit(const T(SubmitJobRequest) *r, const val_roots *roots, val_err *e) {
  if (r->priority < -1000 || r->priority > 1000)
    return bad(e, "priority: must be in [-1000, 1000] (got %d)", r->priority);
  return val_spec(r->spec, "spec", roots, e);
}

int val_plan_sizing(const T(PlanJobRequest) *r, val_err *e) {
  if (!isfinite(r->flops) || r->flops < 0 || r->flops > 1e35)
    return bad(e, "flops: must be a number in [0, 1e35] (got %g)", r->flops);
  if (!isfinite(r->gpu_hours) || r->gpu_hours < 0 || r->gpu_hours > 1e9)
    return bad(e, "gpu_hours: must be a number in [0, 1e9] (got %g)", r->gpu_hours);
  if (r->flops > 0 && r->gpu_hours > 0) return bad(e, "gpu_hours: give flops or gpu_hours, not both");
  if (*r->fit && r->flops == 0 && r->gpu_hours == 0) return bad(e, "fit: only with flops or gpu_hours");
  eng_scaling_fit f;
  eng_err ee = {0};
  if (*r->fit && eng_scaling_parse(r->fit, &f, &ee)) return bad(e, "%s", ee.msg);
  return 0;
}

int val_list(const T(ListJobsRequest) *r, val_err *e) {
  if (val_message(&r->base, "", e)) return -1;
  for (size_t i = 0; i < r->n_states; i++) {
    if (r->states[i] == 0 || !protobuf_c_enum_descriptor_get_value(&traind__v1__job_state__descriptor, r->states[i]))
      return bad(e, "states[%zu]: %d is not a job state", i, r->states[i]);
  }
  if (r->page_size < 0 || r->page_size > 1000) return bad(e, "page_size: must be in [0, 1000] (got %d)", r->page_size);
  if (*r->page_token && val_id(r->page_token, "page_token", e)) return -1;
  return 0;
}

int val_watch(const T(WatchJobRequest) *r, val_err *e) {
  if (val_message(&r->base, "", e)) return -1;
  if (r->after_seq > (uint64_t)INT64_MAX) return bad(e, "after_seq: larger than 2^63-1");
  return val_id(r->job_id, "job_id", e);
}

int val_score(const T(ScoreDataRequest) *r, val_err *e) {
  if (val_message(&r->base, "", e)) return -1;
  if (r->seq_len < 2 || r->seq_len > (1 << 20)) return bad(e, "seq_len: must be in [2, 1048576] (got %d)", r->seq_len);
  if (r->batch_size < 0 || r->batch_size > 4096)
    return bad(e, "batch_size: must be in [0, 4096] (got %d; 0: 8)", r->batch_size);
  if (!*r->model_dir) return bad(e, "model_dir: required (a Hugging Face directory under a data root)");
  if (!*r->data_path) return bad(e, "data_path: required");
  return 0;
}

int val_export(const T(ExportJobRequest) *r, val_err *e) {
  if (val_message(&r->base, "", e)) return -1;
  if (r->step < 0) return bad(e, "step: must not be negative (got %lld)", (long long)r->step);
  return val_id(r->job_id, "job_id", e);
}
