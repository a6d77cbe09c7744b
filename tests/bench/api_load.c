// The API load of tests/bench/api.sh: C concurrent clients (a channel each,
// one call in flight each, the next sent when its answer is in) make N
// SubmitJob calls in total with request ids, of which 10% are deliberate
// retries — half sent again by the same client after the answer, half sent
// by the next client at the same point of its sequence, so concurrently with
// the original — mixed with a ListJobs every 10th call. Then it lists every
// job and checks that each request id has exactly one job and that every call
// for an id got that job.
//
// The clients are driven from one thread over one completion queue, not a
// thread each: with a thread per client the gRPC core's single poller hands
// every completion from thread to thread, and that load generator took as
// much cpu as the daemon it measured, on the same two cores. The channels
// share one connection (the core's global subchannel pool), as they always
// have here: 64 connections of their own cost the daemon a third more cpu
// per call and gave a higher p99.
// Last line: "api: p50 <ms> ms, p99 <ms> ms, <n> lost, <n> duplicated".
#define _GNU_SOURCE
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobfile.h"
#include "pbset.h"
#include "rpc.h"

#include "bench.h"

#define K(x) TRAIND__V1__##x

static int clients, unique;
static char (*job_of)[80]; // per request id: the job the first answer named
static int *mismatch;      // per request id: answers that named another job

enum { OP_SUBMIT, OP_LIST };
typedef struct op {
  int kind, id;
} op;

// One client: its connection, its calls in order, the one in flight.
typedef struct client {
  grpc_channel *ch;
  op *ops;
  int n_ops, next;
  grpc_call *call;
  const op *cur;
  grpc_byte_buffer *send, *recv;
  grpc_metadata_array initial, trailing;
  grpc_status_code code;
  grpc_slice details;
  double t0;
} client;

static double *lat; // seconds per submit
static int n_lat, failed;
static Traind__V1__SubmitJobRequest *submit_req;

// Client index's calls: ids i with i % clients == index, in order; id i is
// retried by its own client when i % 20 == 1, and sent concurrently by the
// next client when i % 20 == 2 (that client sends it at the same position of
// its sequence); a list every 10th round.
static void plan(client *c, int index) {
  c->ops = calloc((size_t)(unique / clients + 1) * 4 + 4, sizeof *c->ops);
  int prev = (index + clients - 1) % clients, rounds = 0;
  for (int base = 0; base < unique; base += clients) {
    int mine = base + index, theirs = base + prev;
    if (mine < unique) {
      c->ops[c->n_ops++] = (op){OP_SUBMIT, mine};
      if (mine % 20 == 1) c->ops[c->n_ops++] = (op){OP_SUBMIT, mine};
    }
    if (theirs < unique && theirs % 20 == 2) c->ops[c->n_ops++] = (op){OP_SUBMIT, theirs};
    if (++rounds % 10 == 0) c->ops[c->n_ops++] = (op){OP_LIST, 0};
  }
}

static grpc_byte_buffer *bytes_of(const ProtobufCMessage *m) {
  size_t n = protobuf_c_message_get_packed_size(m);
  grpc_slice sl = grpc_slice_malloc(n);
  protobuf_c_message_pack(m, GRPC_SLICE_START_PTR(sl));
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&sl, 1);
  grpc_slice_unref(sl);
  return bb;
}

// Starts the client's next call; 0 when it has none left.
static int start(client *c, grpc_completion_queue *cq) {
  if (c->next == c->n_ops) return 0;
  c->cur = &c->ops[c->next++];
  const char *method;
  if (c->cur->kind == OP_SUBMIT) {
    char rid[32], err[256];
    snprintf(rid, sizeof rid, "bench-%d", c->cur->id);
    pbset(&submit_req->base, "request_id", rid, err, sizeof err);
    c->send = bytes_of(&submit_req->base);
    method = "/traind.v1.Trainer/SubmitJob";
  } else {
    Traind__V1__ListJobsRequest l = K(LIST_JOBS_REQUEST__INIT);
    l.page_size = 100;
    c->send = bytes_of(&l.base);
    method = "/traind.v1.Trainer/ListJobs";
  }
  grpc_slice m = grpc_slice_from_static_string(method);
  c->call = grpc_channel_create_call(c->ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, m, NULL,
                                     gpr_time_add(gpr_now(GPR_CLOCK_REALTIME), gpr_time_from_seconds(60, GPR_TIMESPAN)),
                                     NULL);
  grpc_metadata_array_init(&c->initial);
  grpc_metadata_array_init(&c->trailing);
  c->recv = NULL;
  c->details = grpc_empty_slice();
  grpc_op ops[6];
  memset(ops, 0, sizeof ops);
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = c->send;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = &c->initial;
  ops[4].op = GRPC_OP_RECV_MESSAGE;
  ops[4].data.recv_message.recv_message = &c->recv;
  ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[5].data.recv_status_on_client.trailing_metadata = &c->trailing;
  ops[5].data.recv_status_on_client.status = &c->code;
  ops[5].data.recv_status_on_client.status_details = &c->details;
  c->t0 = eng_now();
  if (grpc_call_start_batch(c->call, ops, 6, c, NULL) != GRPC_CALL_OK) {
    fprintf(stderr, "api_load: cannot start a call\n");
    exit(1);
  }
  return 1;
}

// What the client's finished call holds.
static void call_end(client *c) {
  if (c->recv) grpc_byte_buffer_destroy(c->recv);
  grpc_byte_buffer_destroy(c->send);
  grpc_slice_unref(c->details);
  grpc_metadata_array_destroy(&c->initial);
  grpc_metadata_array_destroy(&c->trailing);
  grpc_call_unref(c->call);
}

// The answer to the client's call is in.
static void finish(client *c) {
  const op *o = c->cur;
  if (o->kind == OP_SUBMIT) lat[n_lat++] = eng_now() - c->t0;
  // A list's answer is only checked for its status: the one thread that
  // stands in for 64 clients would otherwise spend, for every list round,
  // milliseconds decoding jobs it never looks at while the other clients'
  // answers wait (the final listing below checks the jobs).
  if (o->kind == OP_LIST && c->code == GRPC_STATUS_OK && c->recv) {
    call_end(c);
    return;
  }
  ProtobufCMessage *reply = NULL;
  if (c->code == GRPC_STATUS_OK && c->recv) {
    grpc_byte_buffer_reader rd;
    if (grpc_byte_buffer_reader_init(&rd, c->recv)) {
      grpc_slice sl = grpc_byte_buffer_reader_readall(&rd);
      grpc_byte_buffer_reader_destroy(&rd);
      const ProtobufCMessageDescriptor *d = o->kind == OP_SUBMIT ? &traind__v1__submit_job_response__descriptor
                                                                 : &traind__v1__list_jobs_response__descriptor;
      reply = protobuf_c_message_unpack(d, NULL, GRPC_SLICE_LENGTH(sl), GRPC_SLICE_START_PTR(sl));
      grpc_slice_unref(sl);
    }
  }
  if (!reply) {
    char *msg = grpc_slice_to_c_string(c->details);
    fprintf(stderr, "api_load: %s %d: %s %s\n", o->kind == OP_SUBMIT ? "submit" : "list", o->id,
            rpc_code_name(c->code), msg);
    gpr_free(msg);
    if (o->kind == OP_SUBMIT) failed++;
  } else if (o->kind == OP_SUBMIT) {
    const char *job = ((Traind__V1__SubmitJobResponse *)reply)->job->id;
    if (!job_of[o->id][0]) snprintf(job_of[o->id], sizeof job_of[o->id], "%s", job);
    else if (strcmp(job_of[o->id], job)) mismatch[o->id]++;
  }
  if (reply) protobuf_c_message_free_unpacked(reply, NULL);
  call_end(c);
}

// Every client's channel is connected before the clock starts: the
// latencies are those of submits on an open connection, as a client that
// stays connected sees them, not those of the first calls, which set the
// connection up (how long that took is printed on its own line).
static void connect_all(client *cs, grpc_completion_queue *cq) {
  int waiting = 0;
  gpr_timespec deadline = gpr_time_add(gpr_now(GPR_CLOCK_REALTIME), gpr_time_from_seconds(30, GPR_TIMESPAN));
  for (int i = 0; i < clients; i++) {
    grpc_connectivity_state st = grpc_channel_check_connectivity_state(cs[i].ch, 1);
    if (st == GRPC_CHANNEL_READY) continue;
    grpc_channel_watch_connectivity_state(cs[i].ch, st, deadline, cq, &cs[i].ch);
    waiting++;
  }
  while (waiting) {
    grpc_event ev = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    if (ev.type != GRPC_OP_COMPLETE) continue;
    grpc_channel **ch = ev.tag;
    if (!ev.success) {
      fprintf(stderr, "api_load: a client could not connect within 30 s\n");
      exit(1);
    }
    grpc_connectivity_state st = grpc_channel_check_connectivity_state(*ch, 1);
    if (st == GRPC_CHANNEL_READY) waiting--;
    else grpc_channel_watch_connectivity_state(*ch, st, deadline, cq, ch);
  }
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: api_load ADDR JOBFILE CLIENTS SUBMITS\n");
    return 2;
  }
  const char *addr = argv[1], *jobfile = argv[2];
  clients = atoi(argv[3]);
  int submits = atoi(argv[4]);
  unique = submits * 10 / 11; // + 10% retries = submits
  job_of = calloc((size_t)unique, sizeof *job_of);
  mismatch = calloc((size_t)unique, sizeof *mismatch);
  char err[256];
  grpc_init();
  submit_req = (Traind__V1__SubmitJobRequest *)pbset_new(&traind__v1__submit_job_request__descriptor);
  if (jobfile_load(submit_req, jobfile, err, sizeof err)) {
    fprintf(stderr, "api_load: %s\n", err);
    return 1;
  }
  client *cs = calloc((size_t)clients, sizeof *cs);
  lat = calloc((size_t)submits + 16, sizeof *lat);
  char target[4200];
  snprintf(target, sizeof target, "%s%s", addr[0] == '/' ? "unix:" : "", addr);
  grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
  int active = 0;
  for (int i = 0; i < clients; i++) {
    grpc_channel_credentials *creds = grpc_insecure_credentials_create();
    cs[i].ch = grpc_channel_create(target, creds, NULL);
    grpc_channel_credentials_release(creds);
    plan(&cs[i], i);
  }
  double tc = eng_now();
  connect_all(cs, cq);
  printf("%d clients connected in %.1f ms\n", clients, (eng_now() - tc) * 1e3);
  double t0 = eng_now();
  for (int i = 0; i < clients; i++) active += start(&cs[i], cq);
  while (active) {
    grpc_event ev = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    if (ev.type != GRPC_OP_COMPLETE) continue;
    client *c = ev.tag;
    finish(c);
    if (!start(c, cq)) active--;
  }
  double took = eng_now() - t0;
  for (int i = 0; i < clients; i++) {
    grpc_channel_destroy(cs[i].ch);
    free(cs[i].ops);
  }
  grpc_completion_queue_shutdown(cq);
  while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type != GRPC_QUEUE_SHUTDOWN) {
  }
  grpc_completion_queue_destroy(cq);
  protobuf_c_message_free_unpacked(&submit_req->base, NULL);
  int n = n_lat;
  bench_sort(lat, n);

  // Every job the daemon has, by request id.
  rpc *r;
  if (rpc_open(&r, addr, NULL, err, sizeof err)) return 1;
  int *count = calloc((size_t)unique, sizeof *count);
  char token[80] = "";
  int total = 0;
  for (;;) {
    Traind__V1__ListJobsRequest l = K(LIST_JOBS_REQUEST__INIT);
    l.page_size = 1000;
    l.page_token = token;
    ProtobufCMessage *reply;
    rpc_status st;
    if (rpc_unary(r, "/traind.v1.Trainer/ListJobs", &l.base, &traind__v1__list_jobs_response__descriptor, &reply, 60000,
                  &st)) {
      fprintf(stderr, "api_load: final list: %s %s\n", rpc_code_name(st.code), st.msg);
      return 1;
    }
    Traind__V1__ListJobsResponse *resp = (Traind__V1__ListJobsResponse *)reply;
    for (size_t i = 0; i < resp->n_jobs; i++) {
      int id;
      if (sscanf(resp->jobs[i]->request_id, "bench-%d", &id) == 1 && id >= 0 && id < unique) count[id]++, total++;
    }
    snprintf(token, sizeof token, "%s", resp->next_page_token);
    protobuf_c_message_free_unpacked(reply, NULL);
    if (!*token) break;
  }
  rpc_close(r);
  int lost = 0, dup = 0;
  for (int i = 0; i < unique; i++) {
    lost += count[i] == 0;
    dup += count[i] > 1 ? count[i] - 1 : 0;
    dup += mismatch[i];
  }
  printf("%d clients, %d submits (%d request ids, %d retries), %d failed calls, %.1f s, %.0f submits/s; %d jobs\n",
         clients, n, unique, n - unique, failed, took, n / took, total);
  printf("api: p50 %.2f ms, p99 %.2f ms, %d lost, %d duplicated\n", lat[n / 2] * 1e3, lat[(size_t)(n * 0.99)] * 1e3,
         lost, dup);
  return lost || dup || failed ? 1 : 0;
}
