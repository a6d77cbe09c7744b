// Sets a field of a protobuf-c message from text, by its dotted path
// ("spec.training.steps"), walking the descriptors: submessages are created
// on the way, a oneof member replaces its siblings, a repeated field gets
// the value appended. Values: integers (fields ending in _bytes also take a
// K/M/G/T suffix, powers of 1024), floats, true/false, enum names (the full
// name or its suffix, any case: "qwen3" for ARCH_QWEN3) or numbers, strings.
// Everything is malloc'd, so protobuf_c_message_free_unpacked frees the
// message (its root too: allocate it with pbset_new).
#ifndef TRAIND_CLIENT_PBSET_H
#define TRAIND_CLIENT_PBSET_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>

ProtobufCMessage *pbset_new(const ProtobufCMessageDescriptor *d);
// Returns 0, or -1 with a message naming the path and the problem.
int pbset(ProtobufCMessage *m, const char *path, const char *value, char *err, size_t errlen);
// The field at path, or NULL; *owner gets the message that holds it.
const ProtobufCFieldDescriptor *pbset_field(ProtobufCMessage *m, const char *path, ProtobufCMessage **owner);

#endif
