#include "pbjson.h"

#include <math.h>
#include <stdint.h>

static json_t *real_or_null(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static json_t *value(const ProtobufCFieldDescriptor *f, const void *p) {
  switch (f->type) {
  case PROTOBUF_C_TYPE_INT32:
  case PROTOBUF_C_TYPE_SINT32:
  case PROTOBUF_C_TYPE_SFIXED32: return json_integer(*(const int32_t *)p);
  case PROTOBUF_C_TYPE_UINT32:
  case PROTOBUF_C_TYPE_FIXED32: return json_integer(*(const uint32_t *)p);
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64: return json_integer(*(const int64_t *)p);
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64: return json_integer((json_int_t) * (const uint64_t *)p);
  case PROTOBUF_C_TYPE_FLOAT: return real_or_null(*(const float *)p);
  case PROTOBUF_C_TYPE_DOUBLE: return real_or_null(*(const double *)p);
  case PROTOBUF_C_TYPE_BOOL: return json_boolean(*(const protobuf_c_boolean *)p);
  case PROTOBUF_C_TYPE_ENUM: {
    const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(f->descriptor, *(const int *)p);
    return v ? json_string(v->name) : json_integer(*(const int *)p);
  }
  case PROTOBUF_C_TYPE_STRING: return json_string(*(char *const *)p ? *(char *const *)p : "");
  case PROTOBUF_C_TYPE_BYTES: return json_integer((json_int_t)((const ProtobufCBinaryData *)p)->len);
  case PROTOBUF_C_TYPE_MESSAGE: {
    const ProtobufCMessage *m = *(const ProtobufCMessage *const *)p;
    return m ? pbjson_from(m) : NULL;
  }
  }
  return NULL;
}

static size_t elem_size(const ProtobufCFieldDescriptor *f) {
  switch (f->type) {
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64:
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64:
  case PROTOBUF_C_TYPE_DOUBLE: return 8;
  case PROTOBUF_C_TYPE_BOOL: return sizeof(protobuf_c_boolean);
  case PROTOBUF_C_TYPE_STRING:
  case PROTOBUF_C_TYPE_MESSAGE: return sizeof(void *);
  case PROTOBUF_C_TYPE_BYTES: return sizeof(ProtobufCBinaryData);
  default: return 4;
  }
}

json_t *pbjson_from(const ProtobufCMessage *m) {
  const ProtobufCMessageDescriptor *d = m->descriptor;
  json_t *o = json_object();
  for (unsigned i = 0; i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &d->fields[i];
    const char *base = (const char *)m + f->offset;
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
      size_t n = *(const size_t *)((const char *)m + f->quantifier_offset);
      const char *items = *(const char *const *)base;
      json_t *a = json_array();
      for (size_t k = 0; k < n; k++) {
        json_t *v = value(f, items + k * elem_size(f));
        if (v) json_array_append_new(a, v);
      }
      json_object_set_new(o, f->name, a);
      continue;
    }
    if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) && *(const uint32_t *)((const char *)m + f->quantifier_offset) != f->id)
      continue;
    json_t *v = value(f, base);
    if (v) json_object_set_new(o, f->name, v);
  }
  return o;
}
