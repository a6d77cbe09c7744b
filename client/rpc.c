#include "rpc.h"

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rpc {
  grpc_channel *ch;
  grpc_completion_queue *cq;
  char *auth; // "Bearer <token>" or NULL
};

struct rpc_stream {
  rpc *r;
  grpc_call *call;
  grpc_metadata_array initial, trailing;
  grpc_byte_buffer *recv;
  grpc_status_code code;
  grpc_slice details;
  int ended;
  int md_received;
};

static const char *names[] = {"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
                              "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
                              "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
                              "UNAUTHENTICATED"};

const char *rpc_code_name(grpc_status_code code) {
  return (unsigned)code < sizeof names / sizeof names[0] ? names[code] : "UNKNOWN";
}

static char *read_pem(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (buf) buf[fread(buf, 1, (size_t)n, f)] = 0;
  fclose(f);
  return buf;
}

int rpc_open(rpc **out, const char *addr, const rpc_options *o, char *err, size_t errlen) {
  static int inited;
  if (!inited) {
    grpc_init();
    inited = 1;
  }
  rpc *r = calloc(1, sizeof *r);
  if (!r) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  char target[4200];
  int local = addr[0] == '/' || !strncmp(addr, "unix:", 5);
  snprintf(target, sizeof target, "%s%s", addr[0] == '/' ? "unix:" : "", addr);
  int max = o && o->max_message_bytes ? o->max_message_bytes : 64 << 20;
  grpc_arg args[1] = {{GRPC_ARG_INTEGER, GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, {.integer = max}}};
  grpc_channel_args ch = {1, args};
  grpc_channel_credentials *creds;
  if (local) {
    creds = grpc_insecure_credentials_create();
  } else {
    char *roots = NULL;
    if (o && o->ca_file && !(roots = read_pem(o->ca_file))) {
      snprintf(err, errlen, "--ca %s: cannot read it", o->ca_file);
      free(r);
      return -1;
    }
    creds = grpc_ssl_credentials_create(roots, NULL, NULL, NULL);
    free(roots);
  }
  r->ch = grpc_channel_create(target, creds, &ch);
  grpc_channel_credentials_release(creds);
  r->cq = grpc_completion_queue_create_for_pluck(NULL);
  if (o && o->token) {
    size_t n = strlen(o->token) + 8;
    r->auth = malloc(n);
    if (r->auth) snprintf(r->auth, n, "Bearer %s", o->token);
  }
  *out = r;
  return 0;
}

void rpc_close(rpc *r) {
  if (!r) return;
  grpc_channel_destroy(r->ch);
  grpc_completion_queue_shutdown(r->cq);
  while (grpc_completion_queue_pluck(r->cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type != GRPC_QUEUE_SHUTDOWN) {
  }
  grpc_completion_queue_destroy(r->cq);
  free(r->auth);
  free(r);
}

static gpr_timespec deadline(int timeout_ms) {
  if (timeout_ms <= 0) return gpr_inf_future(GPR_CLOCK_REALTIME);
  return gpr_time_add(gpr_now(GPR_CLOCK_REALTIME), gpr_time_from_millis(timeout_ms, GPR_TIMESPAN));
}

static int wait_tag(rpc *r, void *tag) {
  grpc_event ev = grpc_completion_queue_pluck(r->cq, tag, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  return ev.type == GRPC_OP_COMPLETE && ev.success;
}

static grpc_call *call_new(rpc *r, const char *method, int timeout_ms) {
  grpc_slice m = grpc_slice_from_copied_string(method);
  grpc_call *c = grpc_channel_create_call(r->ch, NULL, GRPC_PROPAGATE_DEFAULTS, r->cq, m, NULL, deadline(timeout_ms), NULL);
  grpc_slice_unref(m); // grpc_channel_create_call does not take the method slice
  return c;
}

static void set_status(rpc_status *st, grpc_status_code code, grpc_slice details) {
  st->code = code;
  size_t n = GRPC_SLICE_LENGTH(details);
  if (n >= sizeof st->msg) n = sizeof st->msg - 1;
  memcpy(st->msg, GRPC_SLICE_START_PTR(details), n);
  st->msg[n] = 0;
}

static void *bb_bytes(grpc_byte_buffer *bb, size_t *n) {
  grpc_byte_buffer_reader rd;
  if (!grpc_byte_buffer_reader_init(&rd, bb)) return NULL;
  grpc_slice sl = grpc_byte_buffer_reader_readall(&rd);
  grpc_byte_buffer_reader_destroy(&rd);
  *n = GRPC_SLICE_LENGTH(sl);
  void *p = malloc(*n ? *n : 1);
  if (p) memcpy(p, GRPC_SLICE_START_PTR(sl), *n);
  grpc_slice_unref(sl);
  return p;
}

// The auth header, when there is one, rides on the initial metadata.
static void fill_md(rpc *r, grpc_op *op, grpc_metadata *md) {
  op->op = GRPC_OP_SEND_INITIAL_METADATA;
  if (!r->auth) return;
  md->key = grpc_slice_from_static_string("authorization");
  md->value = grpc_slice_from_static_string(r->auth);
  op->data.send_initial_metadata.count = 1;
  op->data.send_initial_metadata.metadata = md;
}

int rpc_unary_raw(rpc *r, const char *method, const void *req, size_t n, void **reply, size_t *reply_n,
                  int timeout_ms, rpc_status *st) {
  grpc_call *c = call_new(r, method, timeout_ms);
  grpc_slice sl = grpc_slice_from_copied_buffer(req, n);
  grpc_byte_buffer *send = grpc_raw_byte_buffer_create(&sl, 1);
  grpc_slice_unref(sl);
  grpc_byte_buffer *recv = NULL;
  grpc_metadata_array initial, trailing;
  grpc_metadata_array_init(&initial);
  grpc_metadata_array_init(&trailing);
  grpc_status_code code = GRPC_STATUS_UNKNOWN;
  grpc_slice details = grpc_empty_slice();
  grpc_metadata md;
  grpc_op ops[6];
  memset(ops, 0, sizeof ops);
  fill_md(r, &ops[0], &md);
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = send;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  // Without RECV_INITIAL_METADATA an error status hangs until the deadline.
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = &initial;
  ops[4].op = GRPC_OP_RECV_MESSAGE;
  ops[4].data.recv_message.recv_message = &recv;
  ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[5].data.recv_status_on_client.trailing_metadata = &trailing;
  ops[5].data.recv_status_on_client.status = &code;
  ops[5].data.recv_status_on_client.status_details = &details;
  int tag;
  if (grpc_call_start_batch(c, ops, 6, &tag, NULL) != GRPC_CALL_OK) {
    st->code = GRPC_STATUS_INTERNAL;
    snprintf(st->msg, sizeof st->msg, "cannot start the call");
  } else {
    wait_tag(r, &tag);
    set_status(st, code, details);
    if (reply) *reply = NULL;
    if (code == GRPC_STATUS_OK && reply) {
      if (!recv || !(*reply = bb_bytes(recv, reply_n))) {
        st->code = GRPC_STATUS_INTERNAL;
        snprintf(st->msg, sizeof st->msg, "the reply carried no message");
      }
    }
  }
  grpc_slice_unref(details);
  if (recv) grpc_byte_buffer_destroy(recv);
  grpc_byte_buffer_destroy(send);
  grpc_metadata_array_destroy(&initial);
  grpc_metadata_array_destroy(&trailing);
  grpc_call_unref(c);
  return st->code;
}

int rpc_unary(rpc *r, const char *method, const ProtobufCMessage *req, const ProtobufCMessageDescriptor *reply_type,
              ProtobufCMessage **reply, int timeout_ms, rpc_status *st) {
  size_t n = protobuf_c_message_get_packed_size(req);
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf) {
    st->code = GRPC_STATUS_RESOURCE_EXHAUSTED;
    snprintf(st->msg, sizeof st->msg, "out of memory");
    return st->code;
  }
  protobuf_c_message_pack(req, buf);
  void *out;
  size_t out_n;
  *reply = NULL;
  int rc = rpc_unary_raw(r, method, buf, n, &out, &out_n, timeout_ms, st);
  free(buf);
  if (rc) return rc;
  *reply = protobuf_c_message_unpack(reply_type, NULL, out_n, out);
  free(out);
  if (!*reply) {
    st->code = GRPC_STATUS_INTERNAL;
    snprintf(st->msg, sizeof st->msg, "the reply is not a valid %s", reply_type->name);
  }
  return st->code;
}

// ---- streaming --------------------------------------------------------------------

int rpc_stream_open(rpc *r, const char *method, const ProtobufCMessage *req, int timeout_ms, rpc_stream **out,
                    rpc_status *st) {
  rpc_stream *s = calloc(1, sizeof *s);
  size_t n = protobuf_c_message_get_packed_size(req);
  grpc_slice sl = grpc_slice_malloc(n);
  if (!s) {
    grpc_slice_unref(sl);
    st->code = GRPC_STATUS_RESOURCE_EXHAUSTED;
    snprintf(st->msg, sizeof st->msg, "out of memory");
    return st->code;
  }
  protobuf_c_message_pack(req, GRPC_SLICE_START_PTR(sl));
  grpc_byte_buffer *send = grpc_raw_byte_buffer_create(&sl, 1);
  grpc_slice_unref(sl);
  s->r = r;
  s->call = call_new(r, method, timeout_ms);
  s->details = grpc_empty_slice();
  grpc_metadata_array_init(&s->initial);
  grpc_metadata_array_init(&s->trailing);
  grpc_metadata md;
  grpc_op ops[4];
  memset(ops, 0, sizeof ops);
  fill_md(r, &ops[0], &md);
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = send;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = &s->initial;
  int tag;
  int ok = grpc_call_start_batch(s->call, ops, 4, &tag, NULL) == GRPC_CALL_OK;
  if (ok) wait_tag(r, &tag); // a failure shows in the status, read at the end
  grpc_byte_buffer_destroy(send);
  if (!ok) {
    rpc_stream_close(s);
    st->code = GRPC_STATUS_INTERNAL;
    snprintf(st->msg, sizeof st->msg, "cannot start the call");
    return st->code;
  }
  st->code = GRPC_STATUS_OK;
  st->msg[0] = 0;
  *out = s;
  return 0;
}

static void stream_status(rpc_stream *s, rpc_status *st) {
  if (!s->ended) {
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    op.data.recv_status_on_client.trailing_metadata = &s->trailing;
    op.data.recv_status_on_client.status = &s->code;
    op.data.recv_status_on_client.status_details = &s->details;
    int tag;
    if (grpc_call_start_batch(s->call, &op, 1, &tag, NULL) == GRPC_CALL_OK) wait_tag(s->r, &tag);
    else s->code = GRPC_STATUS_INTERNAL;
    s->ended = 1;
  }
  set_status(st, s->code, s->details);
}

int rpc_stream_next(rpc_stream *s, const ProtobufCMessageDescriptor *type, ProtobufCMessage **msg, rpc_status *st) {
  *msg = NULL;
  if (s->ended) {
    set_status(st, s->code, s->details);
    return 0;
  }
  grpc_op op;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_MESSAGE;
  op.data.recv_message.recv_message = &s->recv;
  int tag;
  s->recv = NULL;
  if (grpc_call_start_batch(s->call, &op, 1, &tag, NULL) == GRPC_CALL_OK) wait_tag(s->r, &tag);
  if (!s->recv) { // the end of the stream
    stream_status(s, st);
    return 0;
  }
  size_t n;
  void *bytes = bb_bytes(s->recv, &n);
  grpc_byte_buffer_destroy(s->recv);
  s->recv = NULL;
  *msg = bytes ? protobuf_c_message_unpack(type, NULL, n, bytes) : NULL;
  free(bytes);
  if (!*msg) {
    grpc_call_cancel(s->call, NULL);
    stream_status(s, st);
    st->code = GRPC_STATUS_INTERNAL;
    snprintf(st->msg, sizeof st->msg, "a message of the stream is not a valid %s", type->name);
    return 0;
  }
  return 1;
}

void rpc_stream_close(rpc_stream *s) {
  if (!s) return;
  if (!s->ended) {
    grpc_call_cancel(s->call, NULL);
    rpc_status ignored;
    stream_status(s, &ignored);
  }
  grpc_slice_unref(s->details);
  grpc_metadata_array_destroy(&s->initial);
  grpc_metadata_array_destroy(&s->trailing);
  grpc_call_unref(s->call);
  free(s);
}
