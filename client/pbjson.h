// A protobuf-c message as JSON (jansson), walked through its descriptor, for
// trainctl's --json output: field names as in the .proto, enums by name,
// 64-bit integers as JSON numbers, NaN as null, unset oneofs and absent
// submessages left out.
#ifndef TRAIND_CLIENT_PBJSON_H
#define TRAIND_CLIENT_PBJSON_H

#include <jansson.h>
#include <protobuf-c/protobuf-c.h>

json_t *pbjson_from(const ProtobufCMessage *m);

#endif
