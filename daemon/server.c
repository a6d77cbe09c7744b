#define _GNU_SOURCE // pthread_setname_np
#include "server.h"

#include <pthread.h>
#include <stdatomic.h>
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc_posix.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "listen.h"
#include "log.h"
#include "mbox.h"
#include "rapid.h"
#include "validate.h"

// One operation in flight on the completion queue. The cq thread fills ok,
// then runs fn itself (on_cq: a call's arrival and its request message,
// before the loop has seen the call) or posts item for fn to run on the
// loop.
typedef struct srv_tag {
  mbox_item item;
  int ok;
  int on_cq;
  void (*fn)(struct srv_tag *t);
  srv_call *c; // the call it belongs to, or NULL for the server's own tags
  srv *s;      // the server's own tags
} srv_tag;

struct srv_call {
  srv *s;
  grpc_call *call;                  // NULL until request_call completes
  grpc_call_details details;
  grpc_metadata_array md;           // request metadata, owned by the call
  srv_tag t_new, t_recv, t_ready, t_send, t_close;
  grpc_byte_buffer *recv_buf;
  grpc_byte_buffer *send_buf;       // kept until its batch completes
  int client_cancelled;             // RECV_CLOSE_ON_SERVER's out value
  int recv_ok;                      // the request message arrived and decoded
  val_err recv_err;                 // else why not, when the client sent one
  int fd;                           // the Unix connection's descriptor, else -1
  srv_caller caller;
  int handed;                       // given to the loop (cq thread's flag)
  int md_sent;                      // SEND_INITIAL_METADATA was started
  int pending;                      // batches started and not yet back
  int send_busy;                    // a SEND_MESSAGE or the status is in flight
  int status_started;               // the status is sent or queued: no more sends
  int closed;                       // the close tag came back: the call is over
  int finish_code;                  // a status asked for while a send was busy, else -1
  char *finish_msg;
  const srv_method *m;
  ProtobufCMessage *req;
  srv_sent_fn sent;
  srv_close_fn on_close;
  void *app;
};

struct srv {
  uv_loop_t *loop;
  grpc_server *server;
  grpc_completion_queue *cq;
  uv_thread_t thread;
  mbox mb;
  lsn *unix_lsn;                     // the Unix socket (daemon/listen.h)
  rapid *rapid;                     // its calls' resets (cq thread)
  srv_tag t_shutdown;               // server shutdown finished
  srv_tag t_thread_done;            // the cq thread saw GRPC_QUEUE_SHUTDOWN
  const srv_method *methods;
  int n_methods;
  void *data;
  char *token;
  _Atomic int stopping;             // read by the cq thread (call_arm)
  // Calls handed to the loop and not yet taken up by it, and the request_call
  // the cq thread owes for calls that arrived while that was at its limit:
  // a flood of calls (rapid reset) waits in the core, where the listener's
  // per-connection reset count can stop it, not in the loop's mailbox.
  _Atomic int ready_queued, arms_owed;
  void (*done)(void *);
  void *done_arg;
};

static void call_arm(srv *s);
static void handoff(srv_call *c);
static int close_arm(srv_call *c);

#define SRV_READY_MAX 64

// Any thread: the request_calls owed, made now.
static void arms_pay(srv *s) {
  int o = atomic_load(&s->arms_owed);
  while (o > 0)
    if (atomic_compare_exchange_weak(&s->arms_owed, &o, o - 1)) {
      if (!s->stopping) call_arm(s);
      o = atomic_load(&s->arms_owed);
    }
}

// ---- plumbing ------------------------------------------------------------------

static void cq_thread(void *arg) {
  srv *s = arg;
  pthread_setname_np(pthread_self(), "traind-cq");
  for (;;) {
    grpc_event ev = grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
    if (ev.type != GRPC_OP_COMPLETE) continue;
    srv_tag *t = ev.tag;
    t->ok = ev.success;
    if (t->on_cq) t->fn(t);
    else mbox_post(&s->mb, &t->item);
  }
  mbox_post(&s->mb, &s->t_thread_done.item);
}

static void on_mbox(mbox *b, mbox_item *it) {
  (void)b;
  srv_tag *t = (srv_tag *)it;
  t->fn(t);
}

static void call_free(srv_call *c) {
  if (c->call) grpc_call_unref(c->call);
  grpc_call_details_destroy(&c->details);
  grpc_metadata_array_destroy(&c->md);
  if (c->recv_buf) grpc_byte_buffer_destroy(c->recv_buf);
  if (c->send_buf) grpc_byte_buffer_destroy(c->send_buf);
  if (c->req) protobuf_c_message_free_unpacked(c->req, NULL);
  free(c->finish_msg);
  free(c);
}

// Every completion ends here: a call is freed once it is over and none of
// its batches is still out.
static void call_settle(srv_call *c) {
  if (c->closed && c->pending == 0) call_free(c);
}

static int call_batch(srv_call *c, const grpc_op *ops, size_t n, srv_tag *t) {
  grpc_call_error err = grpc_call_start_batch(c->call, ops, n, t, NULL);
  if (err != GRPC_CALL_OK) {
    log_err("grpc: start_batch on %.*s failed (error %d)", (int)GRPC_SLICE_LENGTH(c->details.method),
            (const char *)GRPC_SLICE_START_PTR(c->details.method), (int)err);
    return -1;
  }
  c->pending++;
  return 0;
}

static grpc_byte_buffer *pack(const ProtobufCMessage *msg) {
  size_t n = protobuf_c_message_get_packed_size(msg);
  grpc_slice sl = grpc_slice_malloc(n);
  protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(sl));
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&sl, 1);
  grpc_slice_unref(sl);
  return bb;
}

// ---- status and messages ---------------------------------------------------------

static void on_send(srv_tag *t) {
  srv_call *c = t->c;
  c->pending--;
  c->send_busy = 0;
  if (c->send_buf) grpc_byte_buffer_destroy(c->send_buf);
  c->send_buf = NULL;
  if (c->finish_code >= 0) { // a status waited for this message
    grpc_status_code code = (grpc_status_code)c->finish_code;
    c->finish_code = -1;
    char *msg = c->finish_msg;
    c->finish_msg = NULL;
    srv_finish(c, code, "%s", msg ? msg : "");
    free(msg);
  } else if (c->sent && !c->status_started) {
    srv_sent_fn fn = c->sent;
    c->sent = NULL;
    fn(c, t->ok);
  }
  call_settle(c);
}

// The ops that end a call: its headers unless sent, the reply if any, the
// status (details: the caller's, alive until start_batch). The call is
// marked as ending. Their count.
static size_t status_ops(srv_call *c, grpc_status_code code, grpc_slice *details, const ProtobufCMessage *reply,
                         grpc_op ops[3]) {
  memset(ops, 0, 3 * sizeof *ops);
  size_t n = 0;
  if (!c->md_sent) { // a unary answer, or a refused call
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    c->md_sent = 1;
  }
  if (reply) {
    c->send_buf = pack(reply);
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = c->send_buf;
  }
  ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
  ops[n].data.send_status_from_server.status = code;
  ops[n++].data.send_status_from_server.status_details = details;
  c->status_started = 1;
  c->send_busy = 1;
  return n;
}

static void send_status(srv_call *c, grpc_status_code code, const char *msg, const ProtobufCMessage *reply) {
  grpc_op ops[3];
  grpc_slice details = grpc_slice_from_copied_string(msg);
  size_t n = status_ops(c, code, &details, reply, ops);
  if (call_batch(c, ops, n, &c->t_send)) c->send_busy = 0;
  grpc_slice_unref(details); // the core does not keep status_details past start_batch
}

struct srv_later {
  srv_call *c;
  grpc_op ops[3];
  size_t n;
  grpc_slice details;
};

srv_later *srv_reply_prepare(srv_call *c, const ProtobufCMessage *msg) {
  if (c->status_started || c->closed) return NULL;
  srv_later *l = malloc(sizeof *l);
  if (!l) {
    srv_fail(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "request: out of memory");
    return NULL;
  }
  l->c = c;
  l->details = grpc_empty_slice();
  l->n = status_ops(c, GRPC_STATUS_OK, &l->details, msg, l->ops);
  c->pending++; // the batch to come: the call stays until it is back
  return l;
}

// Any thread. The call is the loop's, but none of what this reads changes
// while the batch is owed (pending keeps it); the completion goes to the
// loop as every send's does.
void srv_reply_send(srv_later *l) {
  srv_call *c = l->c;
  grpc_call_error err = grpc_call_start_batch(c->call, l->ops, l->n, &c->t_send, NULL);
  free(l);
  if (err != GRPC_CALL_OK) {
    log_err("grpc: start_batch of a reply failed (error %d)", (int)err);
    c->t_send.ok = 0;
    mbox_post(&c->s->mb, &c->t_send.item);
  }
}

void srv_reply(srv_call *c, const ProtobufCMessage *msg) {
  if (c->status_started || c->closed) return;
  send_status(c, GRPC_STATUS_OK, "", msg);
}

static void vfinish(srv_call *c, grpc_status_code code, const char *fmt, va_list ap) {
  if (c->status_started || c->closed) return;
  char msg[1024];
  vsnprintf(msg, sizeof msg, fmt, ap);
  if (c->send_busy) { // one op of a type at a time: wait for the message in flight
    c->finish_code = (int)code;
    free(c->finish_msg);
    c->finish_msg = strdup(msg);
    c->status_started = 1;
    return;
  }
  if (code != GRPC_STATUS_OK)
    log_debug("%.*s: status %d: %s", (int)GRPC_SLICE_LENGTH(c->details.method),
              (const char *)GRPC_SLICE_START_PTR(c->details.method), (int)code, msg);
  send_status(c, code, msg, NULL);
}

void srv_fail(srv_call *c, grpc_status_code code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfinish(c, code, fmt, ap);
  va_end(ap);
}

void srv_finish(srv_call *c, grpc_status_code code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfinish(c, code, fmt, ap);
  va_end(ap);
}

void srv_send(srv_call *c, const ProtobufCMessage *msg, srv_sent_fn sent) {
  if (c->status_started || c->closed || c->send_busy) {
    if (!c->send_busy && sent) sent(c, 0);
    return;
  }
  grpc_op op;
  memset(&op, 0, sizeof op);
  c->send_buf = pack(msg);
  op.op = GRPC_OP_SEND_MESSAGE;
  op.data.send_message.send_message = c->send_buf;
  c->sent = sent;
  c->send_busy = 1;
  // Alone in its batch, so that its success bit means something: the core
  // reports success for RECV_CLOSE_ON_SERVER and for any op batched with it.
  if (call_batch(c, &op, 1, &c->t_send)) {
    c->send_busy = 0;
    c->sent = NULL;
    if (sent) sent(c, 0);
  }
}

void srv_on_close(srv_call *c, srv_close_fn fn, void *app) {
  c->on_close = fn;
  c->app = app;
}

void *srv_call_data(const srv_call *c) { return c->s->data; }

void *srv_call_app(const srv_call *c) { return c->app; }

const srv_caller *srv_call_caller(const srv_call *c) { return &c->caller; }

// ---- a call's life ---------------------------------------------------------------

static void on_close(srv_tag *t) {
  srv_call *c = t->c;
  c->pending--;
  c->closed = 1;
  c->sent = NULL;
  if (c->on_close) {
    srv_close_fn fn = c->on_close;
    c->on_close = NULL;
    fn(c, c->app);
  }
  call_settle(c);
}

// Constant time over the token's length, so timing says nothing about it.
static int token_ok(const srv *s, const grpc_metadata_array *md) {
  for (size_t i = 0; i < md->count; i++) {
    const grpc_slice *k = &md->metadata[i].key, *v = &md->metadata[i].value;
    if (GRPC_SLICE_LENGTH(*k) != 13 || memcmp(GRPC_SLICE_START_PTR(*k), "authorization", 13)) continue;
    size_t tl = strlen(s->token), vl = GRPC_SLICE_LENGTH(*v);
    if (vl != tl + 7 || memcmp(GRPC_SLICE_START_PTR(*v), "Bearer ", 7)) return 0;
    const unsigned char *p = GRPC_SLICE_START_PTR(*v) + 7;
    unsigned char diff = 0;
    for (size_t j = 0; j < tl; j++) diff |= (unsigned char)(p[j] ^ (unsigned char)s->token[j]);
    return diff == 0;
  }
  return 0;
}

// cq thread, as the call arrives (its peer reads "unknown" once it is
// over): local calls come through the Unix listener, whose connections the
// core names "fd:N". The descriptor stays the connection's while the call
// holds it (the core closes it only when the transport, which the call
// references, is gone).
static void call_peer_fd(srv_call *c) {
  char *peer = grpc_call_get_peer(c->call);
  char end;
  if (!peer || sscanf(peer, "fd:%d%c", &c->fd, &end) != 1) c->fd = -1;
  gpr_free(peer);
}

// Loop: a local caller is its connection's peer.
static void call_identify(srv_call *c) {
  lsn_peer p;
  if (c->fd >= 0 && c->s->unix_lsn && !lsn_peer_of(c->s->unix_lsn, c->fd, &p))
    c->caller = (srv_caller){.local = 1, .peer = p};
}

// cq thread: the call is over. A client's cancel is counted here, at the
// core's pace (rapid.h); a call the loop never had ends here, one it has
// goes on to on_close there.
static void on_close_cq(srv_tag *t) {
  srv_call *c = t->c;
  if (c->client_cancelled && c->s->rapid) rapid_note(c->s->rapid, c->fd);
  if (c->handed) {
    t->fn = on_close;
    mbox_post(&c->s->mb, &t->item);
    return;
  }
  c->pending--;
  c->closed = 1;
  call_settle(c);
}

// Loop: the call with its request (or its failure) is the loop's from here.
// Who calls and whether they may is decided here, where the listener's
// peers and the token live.
static void on_ready(srv_tag *t) {
  srv_call *c = t->c;
  srv *s = c->s;
  atomic_fetch_sub(&s->ready_queued, 1);
  arms_pay(s);
  call_identify(c);
  size_t len = GRPC_SLICE_LENGTH(c->details.method);
  const char *path = (const char *)GRPC_SLICE_START_PTR(c->details.method);
  if (!c->m) srv_fail(c, GRPC_STATUS_UNIMPLEMENTED, "method: not served by traind: %.*s", (int)len, path);
  else if (!c->caller.local && (!s->token || !token_ok(s, &c->md)))
    srv_fail(c, GRPC_STATUS_UNAUTHENTICATED, "authorization: a valid bearer token is required over TCP");
  else if (s->stopping) srv_fail(c, GRPC_STATUS_UNAVAILABLE, "traind is shutting down");
  else if (c->recv_err.msg[0]) srv_fail(c, c->recv_err.code, "%s", c->recv_err.msg);
  else if (c->recv_ok && !c->closed) c->m->handle(c, c->req);
  call_settle(c);
}

// cq thread, the call still its own: the request message is decoded here,
// off the loop, and the close armed; then the loop gets the call.
static void on_recv(srv_tag *t) {
  srv_call *c = t->c;
  c->pending--;
  if (!t->ok || !c->recv_buf) {
    // Over before its request came (its client cancelled it, or the message
    // broke a limit and the core failed the call), or half-closed without
    // one (the same to the core: ok, no message; such a call is refused
    // here, and counts as cancelled like the rest): the loop never sees it,
    // so a flood of such calls cannot hold the next ones back in the core.
    if (t->ok)
      grpc_call_cancel_with_status(c->call, GRPC_STATUS_INVALID_ARGUMENT, "request: no request message was sent",
                                   NULL);
    if (close_arm(c)) call_settle(c);
    return;
  }
  if (c->m) {
    grpc_byte_buffer_reader rd;
    grpc_slice sl = grpc_empty_slice();
    if (grpc_byte_buffer_reader_init(&rd, c->recv_buf)) {
      sl = grpc_byte_buffer_reader_readall(&rd);
      grpc_byte_buffer_reader_destroy(&rd);
    }
    if (!val_wire(c->m->req, GRPC_SLICE_START_PTR(sl), GRPC_SLICE_LENGTH(sl), &c->recv_err)) {
      c->req = protobuf_c_message_unpack(c->m->req, NULL, GRPC_SLICE_LENGTH(sl), GRPC_SLICE_START_PTR(sl));
      if (c->req) c->recv_ok = 1;
      else {
        c->recv_err.code = GRPC_STATUS_INVALID_ARGUMENT;
        snprintf(c->recv_err.msg, sizeof c->recv_err.msg, "request: not a valid %s message", c->m->req->name);
      }
    }
    grpc_slice_unref(sl);
  }
  if (c->recv_buf) grpc_byte_buffer_destroy(c->recv_buf);
  c->recv_buf = NULL;
  handoff(c);
}

// cq thread: arms the close, which reports the call's end and whether its
// client cancelled it (on_close_cq). 0, or -1 with the call cancelled.
static int close_arm(srv_call *c) {
  grpc_op close_op;
  memset(&close_op, 0, sizeof close_op);
  close_op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  close_op.data.recv_close_on_server.cancelled = &c->client_cancelled;
  if (!call_batch(c, &close_op, 1, &c->t_close)) return 0;
  grpc_call_cancel(c->call, NULL);
  c->closed = 1;
  return -1;
}

// cq thread: arms the close and gives the call to the loop; the cq thread
// touches it again only to pass its close on.
static void handoff(srv_call *c) {
  c->handed = 1;
  close_arm(c);
  atomic_fetch_add(&c->s->ready_queued, 1);
  mbox_post(&c->s->mb, &c->t_ready.item);
}

// cq thread: a call arrived. Another is requested at once, and its request
// message read; a streaming call's headers go out now (clients wait for
// them to open a stream), a unary call's with its answer.
static void on_new(srv_tag *t) {
  srv_call *c = t->c;
  srv *s = c->s;
  if (!t->ok) { // the server is shutting down: no call arrived
    call_free(c);
    return;
  }
  // The next call is requested now unless the loop is behind (arms_pay,
  // seq_cst: either this thread sees the loop's take-up or the loop sees
  // what is owed).
  atomic_fetch_add(&s->arms_owed, 1);
  if (atomic_load(&s->ready_queued) < SRV_READY_MAX) arms_pay(s);
  call_peer_fd(c);
  size_t len = GRPC_SLICE_LENGTH(c->details.method);
  const char *path = (const char *)GRPC_SLICE_START_PTR(c->details.method);
  for (int i = 0; i < s->n_methods; i++)
    if (strlen(s->methods[i].path) == len && !memcmp(s->methods[i].path, path, len)) c->m = &s->methods[i];

  grpc_op ops[2];
  memset(ops, 0, sizeof ops);
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[1].op = GRPC_OP_RECV_MESSAGE;
  ops[1].data.recv_message.recv_message = &c->recv_buf;
  int streaming = c->m && c->m->streaming;
  c->md_sent = streaming;
  if (call_batch(c, streaming ? ops : ops + 1, streaming ? 2 : 1, &c->t_recv)) handoff(c); // the loop ends it
}

static void tag_init(srv_tag *t, srv_call *c, void (*fn)(srv_tag *)) {
  t->c = c;
  t->fn = fn;
  t->ok = 0;
}

// Waits for the next call with a fresh srv_call.
static void call_arm(srv *s) {
  srv_call *c = calloc(1, sizeof *c);
  if (!c) {
    log_err("grpc: out of memory for a new call; not accepting calls");
    return;
  }
  c->s = s;
  c->finish_code = -1;
  c->fd = -1;
  grpc_call_details_init(&c->details);
  grpc_metadata_array_init(&c->md);
  tag_init(&c->t_new, c, on_new);
  c->t_new.on_cq = 1;
  tag_init(&c->t_recv, c, on_recv);
  c->t_recv.on_cq = 1;
  tag_init(&c->t_ready, c, on_ready);
  tag_init(&c->t_send, c, on_send);
  tag_init(&c->t_close, c, on_close_cq);
  c->t_close.on_cq = 1;
  grpc_call_error err = grpc_server_request_call(s->server, &c->call, &c->details, &c->md, s->cq, s->cq, &c->t_new);
  if (err != GRPC_CALL_OK) {
    log_err("grpc: request_call failed (error %d)", (int)err);
    call_free(c);
  }
}

// ---- start and stop ----------------------------------------------------------------

static void on_shutdown(srv_tag *t);
static void on_thread_done(srv_tag *t);
static void on_mbox_closed(uv_handle_t *h);

// Tears the core down synchronously, for a start that failed before the cq
// thread existed.
static void srv_core_destroy(srv *s) {
  grpc_server_shutdown_and_notify(s->server, s->cq, NULL);
  grpc_server_cancel_all_calls(s->server);
  grpc_completion_queue_shutdown(s->cq);
  while (grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type != GRPC_QUEUE_SHUTDOWN) {
  }
  grpc_server_destroy(s->server);
  grpc_completion_queue_destroy(s->cq);
}

void srv_token_set(srv *s, const char *token) {
  free(s->token);
  s->token = token && *token ? strdup(token) : NULL;
}

// A connection the Unix listener accepted: the core serves it from here on.
static void on_unix_conn(void *arg, int fd) {
  srv *s = arg;
  grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
  grpc_server_add_channel_from_fd(s->server, fd, creds);
  grpc_server_credentials_release(creds);
}

static int bind_tcp(srv *s, const srv_options *o, char *err, size_t errlen) {
  grpc_ssl_pem_key_cert_pair pair = {o->tls_key_pem, o->tls_cert_pem};
  grpc_server_credentials *creds =
      grpc_ssl_server_credentials_create_ex(NULL, &pair, 1, GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE, NULL);
  if (!creds) {
    snprintf(err, errlen, "tcp %s: the TLS certificate or key is not valid PEM", o->tcp_addr);
    return -1;
  }
  int port = grpc_server_add_http2_port(s->server, o->tcp_addr, creds);
  grpc_server_credentials_release(creds);
  if (port == 0) {
    snprintf(err, errlen, "tcp %s: cannot listen there", o->tcp_addr);
    return -1;
  }
  log_info("listening on tcp %s (port %d, TLS, bearer token)", o->tcp_addr, port);
  return 0;
}

int srv_start(srv **out, uv_loop_t *loop, const srv_options *o, char *err, size_t errlen) {
  srv *s = calloc(1, sizeof *s);
  if (!s) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  s->loop = loop;
  s->methods = o->methods;
  s->n_methods = o->n_methods;
  s->data = o->data;
  s->t_shutdown = (srv_tag){.fn = on_shutdown, .s = s};
  s->t_thread_done = (srv_tag){.fn = on_thread_done, .s = s};

  // The transport's limits (the gRPC core 1.51 that Debian 12 ships has no
  // rapid-reset or length-prefix check of its own):
  //  - MAX_CONCURRENT_STREAMS bounds the calls one connection has open;
  //  - a resource quota bounds the memory every connection's reads may hold:
  //    a message whose length prefix claims more than max_message_bytes is
  //    still pulled in by the core until the quota's pressure makes it reset
  //    the stream, so the quota is what keeps a 2 GiB prefix to a few MiB;
  //  - calls their clients cancel are counted per connection on the cq
  //    thread (rapid.h), which closes a rapid-reset flood.
  grpc_resource_quota *q = grpc_resource_quota_create("traind");
  grpc_resource_quota_resize(q, (size_t)o->max_message_bytes * 4 + (16u << 20));
  grpc_arg args[4] = {
      {GRPC_ARG_INTEGER, GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, {.integer = o->max_message_bytes}},
      // Streams stay open for hours (watch): keep idle connections alive.
      {GRPC_ARG_INTEGER, GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, {.integer = 1}},
      {GRPC_ARG_INTEGER, GRPC_ARG_MAX_CONCURRENT_STREAMS, {.integer = o->max_streams}},
      {GRPC_ARG_POINTER, GRPC_ARG_RESOURCE_QUOTA, {.pointer = {q, grpc_resource_quota_arg_vtable()}}},
  };
  grpc_channel_args ch = {4, args};
  s->server = grpc_server_create(&ch, NULL);
  grpc_resource_quota_unref(q); // the server holds its own reference
  s->cq = grpc_completion_queue_create_for_next(NULL);
  grpc_server_register_completion_queue(s->server, s->cq, NULL);
  if (o->tcp_addr && bind_tcp(s, o, err, errlen)) goto fail;
  lsn_options lo = {o->unix_path, o->unix_mode, o->max_conns, on_unix_conn, s};
  if (lsn_open(&s->unix_lsn, loop, &lo, err, errlen)) goto fail;
  if (!(s->rapid = rapid_new(o->unix_path, o->max_resets))) {
    snprintf(err, errlen, "out of memory");
    goto fail;
  }
  if (mbox_init(&s->mb, loop, on_mbox, s)) {
    snprintf(err, errlen, "cannot create the loop's wakeup handle");
    goto fail;
  }
  grpc_server_start(s->server);
  if (uv_thread_create(&s->thread, cq_thread, s)) {
    snprintf(err, errlen, "cannot start the completion-queue thread");
    srv_core_destroy(s);
    lsn_close(s->unix_lsn, NULL, NULL);
    mbox_close(&s->mb, on_mbox_closed); // frees s
    return -1;
  }
  for (int i = 0; i < 8; i++) call_arm(s); // a few calls can arrive at once
  *out = s;
  return 0;
fail:
  if (s->unix_lsn) lsn_close(s->unix_lsn, NULL, NULL);
  srv_core_destroy(s);
  rapid_free(s->rapid);
  free(s);
  return -1;
}

void srv_stop(srv *s, void (*done)(void *arg), void *arg) {
  s->stopping = 1;
  s->done = done;
  s->done_arg = arg;
  lsn_close(s->unix_lsn, NULL, NULL); // no new connections; the socket file goes
  s->unix_lsn = NULL;
  grpc_server_shutdown_and_notify(s->server, s->cq, &s->t_shutdown);
  grpc_server_cancel_all_calls(s->server);
}

static void on_shutdown(srv_tag *t) {
  srv *s = t->s;
  grpc_server_destroy(s->server);
  s->server = NULL;
  grpc_completion_queue_shutdown(s->cq); // the thread leaves once the queue is empty
}

static void on_mbox_closed(uv_handle_t *h) {
  mbox *b = h->data;
  srv *s = b->data;
  void (*done)(void *) = s->done;
  void *arg = s->done_arg;
  rapid_free(s->rapid);
  free(s->token);
  free(s);
  if (done) done(arg);
}

static void on_thread_done(srv_tag *t) {
  srv *s = t->s;
  uv_thread_join(&s->thread);
  grpc_completion_queue_destroy(s->cq);
  mbox_close(&s->mb, on_mbox_closed);
}
