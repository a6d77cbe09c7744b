#include "pbset.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

ProtobufCMessage *pbset_new(const ProtobufCMessageDescriptor *d) {
  ProtobufCMessage *m = malloc(d->sizeof_message);
  if (m) d->message_init(m);
  return m;
}

static uint32_t *oneof_case(ProtobufCMessage *m, const ProtobufCFieldDescriptor *f) {
  return (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) ? (uint32_t *)((char *)m + f->quantifier_offset) : NULL;
}

// Frees what a oneof member holds before a sibling takes its place.
static void oneof_clear(ProtobufCMessage *m, const ProtobufCFieldDescriptor *f) {
  uint32_t *c = oneof_case(m, f);
  if (!c || *c == f->id || *c == 0) return;
  const ProtobufCFieldDescriptor *old = protobuf_c_message_descriptor_get_field(m->descriptor, *c);
  if (!old) return;
  void **p = (void **)((char *)m + old->offset);
  if (old->type == PROTOBUF_C_TYPE_MESSAGE && *p) protobuf_c_message_free_unpacked(*p, NULL);
  else if (old->type == PROTOBUF_C_TYPE_STRING && *p && *p != old->default_value) free(*p);
  if (old->type == PROTOBUF_C_TYPE_MESSAGE || old->type == PROTOBUF_C_TYPE_STRING) *p = NULL;
  *c = 0;
}

const ProtobufCFieldDescriptor *pbset_field(ProtobufCMessage *m, const char *path, ProtobufCMessage **owner) {
  char name[128];
  for (;;) {
    size_t n = strcspn(path, ".");
    if (n >= sizeof name) return NULL;
    memcpy(name, path, n);
    name[n] = 0;
    const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field_by_name(m->descriptor, name);
    if (!f) return NULL;
    if (!path[n]) {
      *owner = m;
      return f;
    }
    if (f->type != PROTOBUF_C_TYPE_MESSAGE || f->label == PROTOBUF_C_LABEL_REPEATED) return NULL;
    ProtobufCMessage **sub = (ProtobufCMessage **)((char *)m + f->offset);
    uint32_t *c = oneof_case(m, f);
    if (!*sub || (c && *c != f->id)) {
      oneof_clear(m, f);
      if (!(*sub = pbset_new(f->descriptor))) return NULL;
      if (c) *c = f->id;
    }
    m = *sub;
    path += n + 1;
  }
}

static int parse_int(const char *v, int bytes, int64_t lo, int64_t hi, int64_t *out) {
  errno = 0;
  char *end;
  long long x = strtoll(v, &end, 10);
  if (errno || end == v) return -1;
  int64_t mul = 1;
  if (bytes && *end) {
    const char *p = strchr("KMGT", toupper((unsigned char)*end));
    if (!p) return -1;
    mul = (int64_t)1 << (10 * (p - "KMGT" + 1));
    end++;
    if (*end == 'i' || *end == 'I') end++;
    if (*end == 'b' || *end == 'B') end++;
  }
  if (*end) return -1;
  if ((x > 0 && x > hi / mul) || (x < 0 && x < lo / mul)) return -1;
  *out = (int64_t)x * mul;
  return *out < lo || *out > hi ? -1 : 0;
}

static int parse_enum(const ProtobufCEnumDescriptor *d, const char *v, int *out) {
  char *end;
  long x = strtol(v, &end, 10);
  if (!*end && end != v) {
    *out = (int)x;
    return 0;
  }
  for (unsigned i = 0; i < d->n_values; i++) {
    const char *name = d->values[i].name;
    size_t nl = strlen(name), vl = strlen(v);
    // "qwen3" matches ARCH_QWEN3: a suffix after an underscore.
    if (!strcasecmp(name, v) || (vl < nl && name[nl - vl - 1] == '_' && !strcasecmp(name + nl - vl, v))) {
      *out = d->values[i].value;
      return 0;
    }
  }
  return -1;
}

// Room for one more element of a repeated field; returns its address.
static void *append(ProtobufCMessage *m, const ProtobufCFieldDescriptor *f, size_t size) {
  size_t *n = (size_t *)((char *)m + f->quantifier_offset);
  char **arr = (char **)((char *)m + f->offset);
  char *grown = realloc(*arr, (*n + 1) * size);
  if (!grown) return NULL;
  *arr = grown;
  return grown + (*n)++ * size;
}

int pbset(ProtobufCMessage *m, const char *path, const char *v, char *err, size_t errlen) {
  ProtobufCMessage *owner;
  const ProtobufCFieldDescriptor *f = pbset_field(m, path, &owner);
  if (!f) {
    snprintf(err, errlen, "%s: no such field", path);
    return -1;
  }
  int repeated = f->label == PROTOBUF_C_LABEL_REPEATED;
  size_t nl = strlen(f->name);
  int bytes = nl > 6 && !strcmp(f->name + nl - 6, "_bytes");
  int64_t x;
  double dv;
  char *end;
  union {
    int32_t i32;
    uint32_t u32;
    int64_t i64;
    uint64_t u64;
    float f32;
    double f64;
    protobuf_c_boolean b;
    int e;
    char *s;
  } val;
  size_t size = 4;
  switch (f->type) {
  case PROTOBUF_C_TYPE_INT32:
  case PROTOBUF_C_TYPE_SINT32:
  case PROTOBUF_C_TYPE_SFIXED32:
    if (parse_int(v, bytes, INT32_MIN, INT32_MAX, &x)) goto bad_int;
    val.i32 = (int32_t)x;
    break;
  case PROTOBUF_C_TYPE_UINT32:
  case PROTOBUF_C_TYPE_FIXED32:
    if (parse_int(v, bytes, 0, UINT32_MAX, &x)) goto bad_int;
    val.u32 = (uint32_t)x;
    break;
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64:
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64:
    if (parse_int(v, bytes, f->type == PROTOBUF_C_TYPE_UINT64 || f->type == PROTOBUF_C_TYPE_FIXED64 ? 0 : INT64_MIN,
                  INT64_MAX, &x))
      goto bad_int;
    val.i64 = x;
    size = 8;
    break;
  case PROTOBUF_C_TYPE_FLOAT:
  case PROTOBUF_C_TYPE_DOUBLE:
    errno = 0;
    dv = strtod(v, &end);
    if (errno || end == v || *end) {
      snprintf(err, errlen, "%s: \"%s\" is not a number", path, v);
      return -1;
    }
    if (f->type == PROTOBUF_C_TYPE_FLOAT) val.f32 = (float)dv;
    else val.f64 = dv, size = 8;
    break;
  case PROTOBUF_C_TYPE_BOOL:
    if (!strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcmp(v, "1")) val.b = 1;
    else if (!strcasecmp(v, "false") || !strcasecmp(v, "no") || !strcmp(v, "0")) val.b = 0;
    else {
      snprintf(err, errlen, "%s: \"%s\" is not true or false", path, v);
      return -1;
    }
    size = sizeof(protobuf_c_boolean);
    break;
  case PROTOBUF_C_TYPE_ENUM:
    if (parse_enum(f->descriptor, v, &val.e)) {
      const ProtobufCEnumDescriptor *ed = f->descriptor;
      snprintf(err, errlen, "%s: \"%s\" is not a value of %s (e.g. %s)", path, v, ed->name,
               ed->n_values > 1 ? ed->values[1].name : ed->values[0].name);
      return -1;
    }
    break;
  case PROTOBUF_C_TYPE_STRING:
    if (!(val.s = strdup(v))) {
      snprintf(err, errlen, "%s: out of memory", path);
      return -1;
    }
    size = sizeof(char *);
    break;
  default:
    snprintf(err, errlen, "%s: is a %s; set its fields (%s.<field>)", path,
             f->type == PROTOBUF_C_TYPE_MESSAGE ? "message" : "bytes field", path);
    return -1;
  }
  void *dst;
  if (repeated) {
    dst = append(owner, f, size);
  } else {
    oneof_clear(owner, f);
    uint32_t *c = oneof_case(owner, f);
    if (c) *c = f->id;
    dst = (char *)owner + f->offset;
    if (f->type == PROTOBUF_C_TYPE_STRING) {
      char *old = *(char **)dst;
      if (old && old != f->default_value) free(old);
    }
  }
  if (!dst) {
    if (f->type == PROTOBUF_C_TYPE_STRING) free(val.s);
    snprintf(err, errlen, "%s: out of memory", path);
    return -1;
  }
  memcpy(dst, &val, size);
  return 0;
bad_int:
  snprintf(err, errlen, "%s: \"%s\" is not an integer in range%s", path, v, bytes ? " (a K/M/G/T suffix is allowed)" : "");
  return -1;
}
