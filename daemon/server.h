// The gRPC server over the C core, driven from the libuv loop (DESIGN §5).
// The core gives libuv no file descriptor to poll, so one completion queue
// is drained by a dedicated thread (blocking in grpc_completion_queue_next).
// That thread takes a call's first steps itself (the next request_call, the
// request message read and decoded, the close armed) and then posts the call
// to the loop through an mbox, as it posts every later operation's
// completion. A call reaches its method's handler on the loop with its request
// message decoded; the handler answers at once or later (srv_reply /
// srv_fail), or streams (srv_send ... srv_finish).
#ifndef TRAIND_SERVER_H
#define TRAIND_SERVER_H

#include <grpc/grpc.h>
#include <grpc/status.h>
#include <protobuf-c/protobuf-c.h>
#include <sys/types.h>
#include <uv.h>

#include "listen.h"

typedef struct srv srv;
typedef struct srv_call srv_call;

typedef struct srv_method {
  const char *path;                         // "/traind.v1.Trainer/SubmitJob"
  const ProtobufCMessageDescriptor *req;    // its request type
  // Loop thread. req is decoded and belongs to the call, which frees it
  // with protobuf_c_message_free_unpacked: a handler may take a submessage
  // by setting its pointer to NULL.
  void (*handle)(srv_call *c, ProtobufCMessage *req);
  // Server-streaming: the response headers go out at once (clients wait for
  // them to open a stream); a unary answer sends headers, message and status
  // in one write.
  int streaming;
} srv_method;

typedef struct srv_options {
  const char *unix_path;    // socket file (daemon/listen.h: locked, replaced when stale)
  unsigned unix_mode;
  int max_conns;            // open Unix connections at most
  int max_resets;           // calls a Unix connection's client may cancel per second (rapid.h)
  int max_streams;          // calls open at once per connection (HTTP/2 MAX_CONCURRENT_STREAMS)
  const char *tcp_addr;     // "host:port" or NULL; needs TLS and a token
  const char *tls_cert_pem; // contents, not paths
  const char *tls_key_pem;
  int max_message_bytes;    // largest request accepted (RESOURCE_EXHAUSTED above)
  const srv_method *methods;
  int n_methods;
  void *data;               // srv_call_data() returns it
} srv_options;

// Binds and starts serving. Fills err (naming the address) on failure.
int srv_start(srv **out, uv_loop_t *loop, const srv_options *o, char *err, size_t errlen);
// The bearer token that calls over TCP must carry ("authorization: Bearer
// T"); calls over the Unix socket are trusted by its file mode. Copied.
void srv_token_set(srv *s, const char *token);
// Cancels every call (open streams end with UNAVAILABLE), stops listening,
// and calls done on the loop once the core is quiet and the thread joined.
void srv_stop(srv *s, void (*done)(void *arg), void *arg);

void *srv_call_data(const srv_call *c);

// Who is calling. Over the Unix socket: local, with the connection's peer
// credentials (SO_PEERCRED) and its user's groups as they were when it
// connected (lsn_peer). Over TCP: not local, and the bearer token (one per
// daemon) is all there is.
typedef struct srv_caller {
  int local;
  lsn_peer peer;
} srv_caller;
const srv_caller *srv_call_caller(const srv_call *c);

// Unary answers: a message and OK, or a status and a message. The message
// is formatted like printf; it should start with the field or the input
// at fault. Either ends the call for the handler.
void srv_reply(srv_call *c, const ProtobufCMessage *msg);
void srv_fail(srv_call *c, grpc_status_code code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

// A unary answer made now (loop) and sent later from any thread, once
// (srv_reply_send): for an answer that waits for another thread's work (the
// group commit's sync), without a trip back through the loop. The call is
// answered for the handler from here on. NULL when it is over already, or
// out of memory (the call is failed then).
typedef struct srv_later srv_later;
srv_later *srv_reply_prepare(srv_call *c, const ProtobufCMessage *msg);
void srv_reply_send(srv_later *l);

// Streaming: one message in flight at a time; sent(c, ok) runs when the
// core took it (ok = 0: the client is gone). srv_finish ends the stream
// (after the message in flight, if any).
typedef void (*srv_sent_fn)(srv_call *c, int ok);
void srv_send(srv_call *c, const ProtobufCMessage *msg, srv_sent_fn sent);
void srv_finish(srv_call *c, grpc_status_code code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

// A handler that keeps a call past its handle() sets on_close: it runs once
// when the call is over (finished, cancelled, or the client went away), and
// from then on the handler must not use c. app is the handler's state.
typedef void (*srv_close_fn)(srv_call *c, void *app);
void srv_on_close(srv_call *c, srv_close_fn fn, void *app);
void *srv_call_app(const srv_call *c);

#endif
