// POSIX 2008 for pread, strdup and fsync under -std=c17 too.
#define _POSIX_C_SOURCE 200809L

#include "model/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/bf16.h"
#include "common/json_file.h"
#include "common/json_kind.h"
#include "model/atomic_file.h"

// Tensor bytes are little-endian; reading and writing them with memcpy is
// only right on a little-endian host, which is every host the engine targets.
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes little-endian");

static const struct {
  const char *name;
  size_t size;
} dtypes[] = {
    [ENG_ST_F32] = {"F32", 4}, [ENG_ST_BF16] = {"BF16", 2}, [ENG_ST_F16] = {"F16", 2},
    [ENG_ST_I32] = {"I32", 4}, [ENG_ST_I64] = {"I64", 8},
};
enum { N_DTYPES = sizeof dtypes / sizeof dtypes[0] };

// Dtypes of the format that the engine does not read: refused as unsupported
// rather than as malformed.
static const char *const other_dtypes[] = {"BOOL", "U8",  "I8",  "I16",     "U16",     "U32",
                                           "U64",  "F64", "C64", "F8_E5M2", "F8_E4M3", "F8_E8M0"};

const char *eng_st_dtype_name(eng_st_dtype d) {
  return (unsigned)d < N_DTYPES ? dtypes[d].name : "?";
}

size_t eng_st_dtype_size(eng_st_dtype d) { return (unsigned)d < N_DTYPES ? dtypes[d].size : 0; }

// ---- element conversions ---------------------------------------------------------

static float f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

// IEEE half: 1 sign, 5 exponent (bias 15), 10 mantissa bits. Every half is
// exactly a float.
static float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0) {
    // Zero or subnormal: man x 2^-24, exact in float (man < 2^10).
    float mag = (float)man * 0x1p-24f;
    return sign ? -mag : mag;
  }
  if (exp == 31) return f32_from_bits(sign | 0x7f800000u | man << 13); // inf, NaN keeps its payload
  return f32_from_bits(sign | (exp - 15 + 127) << 23 | man << 13);
}

// ---- reader ------------------------------------------------------------------------

static int parse_dtype(const char *path, const char *name, const json_t *v, eng_st_dtype *out,
                       eng_err *e) {
  if (!json_is_string(v))
    return eng_err_set(e, ENG_EINVAL, "%s: tensor \"%s\": field \"dtype\" must be a string, got %s",
                       path, name, eng_json_kind(v));
  const char *s = json_string_value(v);
  for (int d = 0; d < N_DTYPES; d++)
    if (strcmp(s, dtypes[d].name) == 0) {
      *out = (eng_st_dtype)d;
      return ENG_OK;
    }
  for (size_t i = 0; i < sizeof other_dtypes / sizeof other_dtypes[0]; i++)
    if (strcmp(s, other_dtypes[i]) == 0)
      return eng_err_set(e, ENG_ENOTSUP,
                         "%s: tensor \"%s\": dtype \"%s\" is not supported (F32, BF16, F16, I32, "
                         "I64 are)",
                         path, name, s);
  return eng_err_set(e, ENG_EINVAL,
                     "%s: tensor \"%s\": field \"dtype\" is \"%s\", an unknown dtype", path, name,
                     s);
}

static int parse_shape(const char *path, const char *name, const json_t *v, eng_st_tensor *t,
                       eng_err *e) {
  if (!json_is_array(v))
    return eng_err_set(e, ENG_EINVAL, "%s: tensor \"%s\": field \"shape\" must be an array, got %s",
                       path, name, eng_json_kind(v));
  if (json_array_size(v) > ENG_ST_MAX_DIMS)
    return eng_err_set(e, ENG_ENOTSUP,
                       "%s: tensor \"%s\": field \"shape\" has %zu dimensions, "
                       "more than %d",
                       path, name, json_array_size(v), ENG_ST_MAX_DIMS);
  t->ndim = (int)json_array_size(v);
  t->numel = 1;
  size_t i;
  const json_t *dim;
  json_array_foreach(v, i, dim) {
    if (!json_is_integer(dim) || json_integer_value(dim) < 0)
      return eng_err_set(e, ENG_EINVAL,
                         "%s: tensor \"%s\": field \"shape\" entry %zu must be a non-negative "
                         "integer",
                         path, name, i);
    t->shape[i] = json_integer_value(dim);
    if (__builtin_mul_overflow(t->numel, (size_t)t->shape[i], &t->numel))
      return eng_err_set(e, ENG_EINVAL, "%s: tensor \"%s\": field \"shape\" overflows", path, name);
  }
  return ENG_OK;
}

static int parse_offsets(const eng_st_file *f, const char *name, const json_t *v, eng_st_tensor *t,
                         eng_err *e) {
  const json_t *b = json_array_get(v, 0), *en = json_array_get(v, 1);
  if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_integer(b) || !json_is_integer(en) ||
      json_integer_value(b) < 0 || json_integer_value(en) < json_integer_value(b))
    return eng_err_set(e, ENG_EINVAL,
                       "%s: tensor \"%s\": field \"data_offsets\" must be [begin, end] with "
                       "0 <= begin <= end",
                       f->path, name);
  t->begin = (size_t)json_integer_value(b);
  t->end = (size_t)json_integer_value(en);
  size_t nbytes;
  if (__builtin_mul_overflow(t->numel, dtypes[t->dtype].size, &nbytes) ||
      t->end - t->begin != nbytes)
    return eng_err_set(e, ENG_EINVAL,
                       "%s: tensor \"%s\": field \"data_offsets\" [%zu, %zu] spans %zu bytes but "
                       "its shape and dtype %s need %zu x %zu",
                       f->path, name, t->begin, t->end, t->end - t->begin, dtypes[t->dtype].name,
                       t->numel, dtypes[t->dtype].size);
  if (t->end > f->data_size)
    return eng_err_set(e, ENG_EINVAL,
                       "%s: tensor \"%s\": field \"data_offsets\" ends at byte %zu but the file "
                       "holds %zu data bytes (truncated?)",
                       f->path, name, t->end, f->data_size);
  return ENG_OK;
}

static int parse_tensor(const eng_st_file *f, const char *name, const json_t *v, eng_st_tensor *t,
                        eng_err *e) {
  if (!json_is_object(v))
    return eng_err_set(e, ENG_EINVAL, "%s: tensor \"%s\" must be an object, got %s", f->path, name,
                       eng_json_kind(v));
  static const char *const fields[] = {"dtype", "shape", "data_offsets"};
  for (int i = 0; i < 3; i++)
    if (!json_object_get(v, fields[i]))
      return eng_err_set(e, ENG_EINVAL, "%s: tensor \"%s\": field \"%s\" is missing", f->path, name,
                         fields[i]);
  t->name = name;
  int rc = parse_dtype(f->path, name, json_object_get(v, "dtype"), &t->dtype, e);
  if (!rc) rc = parse_shape(f->path, name, json_object_get(v, "shape"), t, e);
  if (!rc) rc = parse_offsets(f, name, json_object_get(v, "data_offsets"), t, e);
  return rc;
}

static int parse_metadata(const char *path, const json_t *v, eng_err *e) {
  if (!json_is_object(v))
    return eng_err_set(e, ENG_EINVAL, "%s: field \"__metadata__\" must be an object, got %s", path,
                       eng_json_kind(v));
  const char *key;
  const json_t *val;
  json_object_foreach((json_t *)v, key, val) {
    if (!json_is_string(val))
      return eng_err_set(e, ENG_EINVAL, "%s: field \"__metadata__.%s\" must be a string, got %s",
                         path, key, eng_json_kind(val));
  }
  return ENG_OK;
}

static int by_begin(const void *a, const void *b) {
  const eng_st_tensor *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return 0;
}

// Sorted by begin, each tensor must start where the previous one ended and
// the last must end at the end of the file: any other gap is an overlap, a
// hole, or trailing bytes.
static int check_tiling(const eng_st_file *f, eng_err *e) {
  size_t at = 0;
  const char *prev = NULL;
  for (int i = 0; i < f->n_tensors; i++) {
    const eng_st_tensor *t = &f->tensors[i];
    if (t->begin < at)
      return eng_err_set(
          e, ENG_EINVAL,
          "%s: tensor \"%s\": field \"data_offsets\" [%zu, %zu] overlaps tensor \"%s\"", f->path,
          t->name, t->begin, t->end, prev);
    if (t->begin > at)
      return eng_err_set(e, ENG_EINVAL,
                         "%s: tensor \"%s\": field \"data_offsets\" begins at %zu, leaving bytes "
                         "%zu..%zu that belong to no tensor",
                         f->path, t->name, t->begin, at, t->begin);
    at = t->end;
    prev = t->name;
  }
  if (at != f->data_size)
    return eng_err_set(e, ENG_EINVAL,
                       "%s: %zu bytes after the last tensor%s%s%s belong to no tensor", f->path,
                       f->data_size - at, prev ? " \"" : "", prev ? prev : "", prev ? "\"" : "");
  return ENG_OK;
}

static int read_at(const eng_st_file *f, void *buf, size_t n, size_t off, eng_err *e) {
  return eng_fs_pread(f->fd, f->path, f->size, buf, n, off, e);
}

static int parse_header(eng_st_file *f, size_t header_len, eng_err *e) {
  char *text = malloc(header_len + 1);
  if (!text) return eng_err_set(e, ENG_ENOMEM, "%s: out of memory for a %zu-byte header", f->path, header_len);
  int rc = read_at(f, text, header_len, 8, e);
  json_error_t jerr;
  if (!rc) f->header = json_loadb(text, header_len, JSON_REJECT_DUPLICATES, &jerr);
  free(text);
  if (rc) return rc;
  if (!f->header)
    return eng_err_set(e, ENG_EINVAL, "%s: header is not valid JSON at byte %d of the file: %s", f->path,
                       8 + jerr.position, eng_json_fault(&jerr));
  if (!json_is_object(f->header))
    return eng_err_set(e, ENG_EINVAL, "%s: header must be a JSON object, got %s", f->path,
                       eng_json_kind(f->header));
  size_t n = json_object_size(f->header);
  const json_t *meta = json_object_get(f->header, "__metadata__");
  if (meta) {
    int rc = parse_metadata(f->path, meta, e);
    if (rc) return rc;
    n--;
  }
  f->tensors = calloc(n ? n : 1, sizeof *f->tensors);
  if (!f->tensors)
    return eng_err_set(e, ENG_ENOMEM, "%s: out of memory for %zu tensors", f->path, n);
  const char *key;
  json_t *v;
  json_object_foreach(f->header, key, v) {
    if (strcmp(key, "__metadata__") == 0) continue;
    int rc = parse_tensor(f, key, v, &f->tensors[f->n_tensors], e);
    if (rc) return rc;
    f->n_tensors++;
  }
  qsort(f->tensors, (size_t)f->n_tensors, sizeof *f->tensors, by_begin);
  return check_tiling(f, e);
}

static int open_file(eng_st_file *f, const eng_fs *fs, eng_err *e) {
  int rc = eng_fs_open(fs, f->path, &f->fd, e);
  if (rc) return rc;
  struct stat st;
  if (fstat(f->fd, &st) != 0) return eng_err_set(e, ENG_EIO, "%s: cannot stat: %s", f->path, strerror(errno));
  if (st.st_size < 8)
    return eng_err_set(e, ENG_EINVAL, "%s: file is %lld bytes, too short for the 8-byte header length", f->path,
                       (long long)st.st_size);
  f->size = (size_t)st.st_size;
  return ENG_OK;
}

int eng_st_open(eng_st_file *f, const eng_fs *fs, const char *path, eng_err *e) {
  memset(f, 0, sizeof *f);
  f->fd = -1;
  f->path = strdup(path);
  if (!f->path) return eng_err_set(e, ENG_ENOMEM, "%s: out of memory", path);
  int rc = open_file(f, fs, e);
  uint64_t header_len;
  if (!rc) rc = read_at(f, &header_len, sizeof header_len, 0, e);
  if (!rc) {
    if (header_len > f->size - 8) {
      rc = eng_err_set(e, ENG_EINVAL,
                       "%s: header length %llu runs past the end of the file (%zu bytes)", f->path,
                       (unsigned long long)header_len, f->size);
    } else {
      f->data_off = 8 + (size_t)header_len;
      f->data_size = f->size - 8 - (size_t)header_len;
      rc = parse_header(f, (size_t)header_len, e);
    }
  }
  if (rc) eng_st_close(f);
  return rc;
}

void eng_st_close(eng_st_file *f) {
  if (f->path && f->fd >= 0) close(f->fd);
  json_decref(f->header);
  free(f->tensors);
  free(f->path);
  memset(f, 0, sizeof *f);
}

const eng_st_tensor *eng_st_find(const eng_st_file *f, const char *name) {
  for (int i = 0; i < f->n_tensors; i++)
    if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
  return NULL;
}

// Half and I64 elements are read this many at a time and then widened or narrowed.
enum { CHUNK = 4096 };

int eng_st_read_f32(const eng_st_file *f, const eng_st_tensor *t, float *out, eng_err *e) {
  const size_t at = f->data_off + t->begin;
  switch (t->dtype) {
  case ENG_ST_F32:
    return read_at(f, out, t->numel * sizeof *out, at, e);
  case ENG_ST_BF16:
  case ENG_ST_F16:
    for (size_t i = 0; i < t->numel; i += CHUNK) {
      uint16_t h[CHUNK];
      size_t n = t->numel - i < CHUNK ? t->numel - i : CHUNK;
      int rc = read_at(f, h, n * sizeof *h, at + 2 * i, e);
      if (rc) return rc;
      for (size_t k = 0; k < n; k++) out[i + k] = t->dtype == ENG_ST_BF16 ? eng_bf16_to_f32(h[k]) : f16_to_f32(h[k]);
    }
    return ENG_OK;
  default:
    return eng_err_set(e, ENG_EINVAL,
                       "%s: tensor \"%s\" has dtype %s; floating point (F32, BF16, F16) is needed",
                       f->path, t->name, dtypes[t->dtype].name);
  }
}

int eng_st_read_i32(const eng_st_file *f, const eng_st_tensor *t, int32_t *out, eng_err *e) {
  const size_t at = f->data_off + t->begin;
  if (t->dtype == ENG_ST_I32) return read_at(f, out, t->numel * sizeof *out, at, e);
  if (t->dtype != ENG_ST_I64)
    return eng_err_set(e, ENG_EINVAL, "%s: tensor \"%s\" has dtype %s; I32 or I64 is needed",
                       f->path, t->name, dtypes[t->dtype].name);
  for (size_t i = 0; i < t->numel; i += CHUNK) {
    int64_t v[CHUNK];
    size_t n = t->numel - i < CHUNK ? t->numel - i : CHUNK;
    int rc = read_at(f, v, n * sizeof *v, at + 8 * i, e);
    for (size_t k = 0; !rc && k < n; k++) {
      if (v[k] < INT32_MIN || v[k] > INT32_MAX)
        return eng_err_set(e, ENG_EINVAL, "%s: tensor \"%s\": element %zu is %lld, outside int32",
                           f->path, t->name, i + k, (long long)v[k]);
      out[i + k] = (int32_t)v[k];
    }
    if (rc) return rc;
  }
  return ENG_OK;
}

// ---- writer ------------------------------------------------------------------------

static size_t src_numel(const eng_st_src *t) {
  size_t n = 1;
  for (int i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i];
  return n;
}

size_t eng_st_src_nbytes(const eng_st_src *t) { return src_numel(t) * dtypes[t->dtype].size; }

static int check_src(const char *path, const eng_st_src *t, const json_t *header, eng_err *e) {
  if (!t->name || !*t->name || strcmp(t->name, "__metadata__") == 0 ||
      json_object_get(header, t->name))
    return eng_err_set(e, ENG_EINVAL, "%s: tensor name \"%s\" is empty, reserved or repeated", path,
                       t->name ? t->name : "(null)");
  if (!t->from && t->dtype != ENG_ST_F32 && t->dtype != ENG_ST_BF16 && t->dtype != ENG_ST_I32)
    return eng_err_set(e, ENG_EINVAL,
                       "%s: tensor \"%s\": cannot write dtype %s (F32, BF16, I32 only)", path,
                       t->name, eng_st_dtype_name(t->dtype));
  if (t->ndim < 0 || t->ndim > ENG_ST_MAX_DIMS)
    return eng_err_set(e, ENG_EINVAL, "%s: tensor \"%s\": %d dimensions", path, t->name, t->ndim);
  size_t n = 1;
  for (int i = 0; i < t->ndim; i++)
    if (t->shape[i] < 0 || __builtin_mul_overflow(n, (size_t)t->shape[i], &n) || n > SIZE_MAX / 8)
      return eng_err_set(e, ENG_EINVAL, "%s: tensor \"%s\": shape entry %d is %lld", path, t->name,
                         i, (long long)t->shape[i]);
  if (n && !t->data && !t->from)
    return eng_err_set(e, ENG_EINVAL, "%s: tensor \"%s\" has no data", path, t->name);
  return ENG_OK;
}

// {"__metadata__": {"format": "pt"}, name: {dtype, shape, data_offsets}, ...}
// with offsets laid end to end in the order given.
static int build_header(const char *path, const eng_st_src *t, int n, json_t **out, eng_err *e) {
  json_t *h = json_object();
  int bad = !h || json_object_set_new(h, "__metadata__", json_pack("{ss}", "format", "pt"));
  size_t at = 0;
  for (int i = 0; !bad && i < n; i++) {
    int rc = check_src(path, &t[i], h, e);
    if (rc) {
      json_decref(h);
      return rc;
    }
    json_t *shape = json_array(), *desc = json_object();
    for (int d = 0; d < t[i].ndim; d++)
      bad |= json_array_append_new(shape, json_integer(t[i].shape[d]));
    size_t end = at + eng_st_src_nbytes(&t[i]);
    bad |= json_object_set_new(desc, "dtype", json_string(dtypes[t[i].dtype].name));
    bad |= json_object_set_new(desc, "shape", shape);
    bad |= json_object_set_new(desc, "data_offsets",
                               json_pack("[II]", (json_int_t)at, (json_int_t)end));
    bad |= json_object_set_new(h, t[i].name, desc);
    at = end;
  }
  if (bad) {
    json_decref(h);
    return eng_err_set(e, ENG_ENOMEM, "%s: out of memory building the header", path);
  }
  *out = h;
  return ENG_OK;
}

eng_st_src eng_st_src_copy(const eng_st_file *f, const eng_st_tensor *t) {
  eng_st_src s = {.name = t->name, .dtype = t->dtype, .ndim = t->ndim, .from = f, .from_t = t};
  memcpy(s.shape, t->shape, sizeof s.shape);
  return s;
}

// Writes the tensor's bytes, converting to bf16 (or copying from a file)
// through a bounded buffer.
static int write_data(eng_afile *af, const eng_st_src *t, uint16_t *buf, size_t buf_len,
                      eng_err *e) {
  size_t numel = src_numel(t);
  if (t->from) {
    const size_t bytes = t->from_t->end - t->from_t->begin, chunk = buf_len * sizeof *buf;
    for (size_t at = 0; at < bytes; at += chunk) {
      size_t k = bytes - at < chunk ? bytes - at : chunk;
      int rc = read_at(t->from, buf, k, t->from->data_off + t->from_t->begin + at, e);
      if (!rc) rc = eng_afile_write(af, buf, k, e);
      if (rc) return rc;
    }
    return ENG_OK;
  }
  if (t->dtype != ENG_ST_BF16)
    return eng_afile_write(af, t->data, numel * dtypes[t->dtype].size, e);
  const float *x = t->data;
  for (size_t at = 0; at < numel; at += buf_len) {
    size_t k = numel - at < buf_len ? numel - at : buf_len;
    for (size_t i = 0; i < k; i++) buf[i] = eng_bf16_from_f32(x[at + i]);
    int rc = eng_afile_write(af, buf, k * sizeof *buf, e);
    if (rc) return rc;
  }
  return ENG_OK;
}

int eng_st_write(const char *path, const eng_st_src *t, int n, eng_err *e) {
  json_t *h = NULL;
  int rc = build_header(path, t, n, &h, e);
  if (rc) return rc;
  char *text = json_dumps(h, JSON_COMPACT);
  json_decref(h);
  enum { BUF_LEN = 1 << 16 };
  uint16_t *buf = malloc(BUF_LEN * sizeof *buf);
  if (!text || !buf) {
    free(text);
    free(buf);
    return eng_err_set(e, ENG_ENOMEM, "%s: out of memory", path);
  }
  size_t len = strlen(text);
  uint64_t padded = (len + 7) / 8 * 8;
  eng_afile af;
  rc = eng_afile_open(&af, path, e);
  if (!rc) rc = eng_afile_write(&af, &padded, sizeof padded, e);
  if (!rc) rc = eng_afile_write(&af, text, len, e);
  if (!rc) rc = eng_afile_write(&af, "        ", padded - len, e);
  for (int i = 0; !rc && i < n; i++) rc = write_data(&af, &t[i], buf, BUF_LEN, e);
  if (!rc)
    rc = eng_afile_commit(&af, e);
  else
    eng_afile_abort(&af);
  free(text);
  free(buf);
  return rc;
}
