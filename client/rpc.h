// libtraind_client: synchronous calls to traind over the gRPC C core, for
// trainctl and the tests. One completion queue per connection, plucked by
// tag, so every call blocks only its caller.
#ifndef TRAIND_CLIENT_RPC_H
#define TRAIND_CLIENT_RPC_H

#include <grpc/grpc.h>
#include <grpc/status.h>
#include <protobuf-c/protobuf-c.h>
#include <stddef.h>

typedef struct rpc rpc;

typedef struct rpc_options {
  const char *token;     // bearer token sent on every call (TCP), or NULL
  const char *ca_file;   // PEM roots for TLS, or NULL for the system's
  int max_message_bytes; // largest reply accepted (0: 64 MiB)
} rpc_options;

typedef struct rpc_status {
  grpc_status_code code;
  char msg[1024];
} rpc_status;

// addr: "unix:/path" or a path (a Unix socket, plain HTTP/2), or
// "host:port" (TLS). Creating the channel does not connect yet.
int rpc_open(rpc **out, const char *addr, const rpc_options *o, char *err, size_t errlen);
void rpc_close(rpc *r);

// A unary call. On OK *reply holds the decoded answer (free it with
// protobuf_c_message_free_unpacked); otherwise st says why. timeout_ms <= 0:
// no deadline. Returns st->code (0 = OK).
int rpc_unary(rpc *r, const char *method, const ProtobufCMessage *req, const ProtobufCMessageDescriptor *reply_type,
              ProtobufCMessage **reply, int timeout_ms, rpc_status *st);
// The same with the request as raw bytes (tests send malformed ones), and
// the reply returned as raw bytes (malloc'd) when reply != NULL.
int rpc_unary_raw(rpc *r, const char *method, const void *req, size_t n, void **reply, size_t *reply_n,
                  int timeout_ms, rpc_status *st);

// A server-streaming call.
typedef struct rpc_stream rpc_stream;
int rpc_stream_open(rpc *r, const char *method, const ProtobufCMessage *req, int timeout_ms, rpc_stream **out,
                    rpc_status *st);
// 1: *msg holds the next message; 0: the stream ended, st has its status
// (returned in code as well); a message that does not decode ends the call
// with INTERNAL.
int rpc_stream_next(rpc_stream *s, const ProtobufCMessageDescriptor *type, ProtobufCMessage **msg, rpc_status *st);
// Cancels the call when it has not ended, and frees it.
void rpc_stream_close(rpc_stream *s);

// "OK", "INVALID_ARGUMENT", ...
const char *rpc_code_name(grpc_status_code code);

#endif
