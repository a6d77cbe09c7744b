// Bad input against a real daemon: malformed requests of every kind each get
// the right status code and a message naming the field, and the daemon keeps
// serving: missing, negative and huge fields, unknown enum values and
// fields, invalid UTF-8, paths outside the data roots or escaping them
// through a symlink, garbage bytes as a message and on the socket, an
// oversized message, a client that disconnects mid-stream, unknown jobs and
// methods.
#define _GNU_SOURCE
#include "e2e/daemon.h"
#include "grpc/health/v1/health.pb-c.h"
#include "jobfile.h"
#include "pbset.h"

#define K(x) TRAIND__V1__##x
#define SUBMIT "/traind.v1.Trainer/SubmitJob"

static td t;
static int cases;
static const char *jobfile;

static void expect(int rc, const rpc_status *st, grpc_status_code code, const char *field, const char *what) {
  CHECK(rc == (int)code, "%s: expected %s, got %s: %s", what, rpc_code_name(code), rpc_code_name(st->code), st->msg);
  CHECK(!field || strstr(st->msg, field), "%s: the message does not name %s: %s", what, field, st->msg);
  cases++;
}

static Traind__V1__SubmitJobRequest *good(void) {
  Traind__V1__SubmitJobRequest *r = (Traind__V1__SubmitJobRequest *)pbset_new(&traind__v1__submit_job_request__descriptor);
  char err[512];
  CHECK(jobfile_load(r, jobfile, err, sizeof err) == 0, "%s", err);
  return r;
}

static int call(const ProtobufCMessage *req, const char *method, const ProtobufCMessageDescriptor *reply_type,
                rpc_status *st) {
  ProtobufCMessage *reply = NULL;
  int rc = rpc_unary(t.r, method, req, reply_type, &reply, 10000, st);
  if (reply) protobuf_c_message_free_unpacked(reply, NULL);
  return rc;
}

// A good request with one field set to value: refused with code, naming field.
static void submit_with(const char *path, const char *value, grpc_status_code code, const char *field) {
  Traind__V1__SubmitJobRequest *r = good();
  char err[512];
  CHECK(pbset(&r->base, path, value, err, sizeof err) == 0, "%s", err);
  rpc_status st;
  int rc = call(&r->base, SUBMIT, &traind__v1__submit_job_response__descriptor, &st);
  char what[600];
  snprintf(what, sizeof what, "SubmitJob with %s = %s", path, value);
  expect(rc, &st, code, field, what);
  protobuf_c_message_free_unpacked(&r->base, NULL);
}

static void submit_raw(const void *bytes, size_t n, grpc_status_code code, const char *field, const char *what) {
  rpc_status st;
  void *reply = NULL;
  size_t rn;
  int rc = rpc_unary_raw(t.r, SUBMIT, bytes, n, &reply, &rn, 10000, &st);
  free(reply);
  expect(rc, &st, code, field, what);
}

static uint8_t *packed(const ProtobufCMessage *m, size_t *n, size_t extra) {
  *n = protobuf_c_message_get_packed_size(m);
  uint8_t *b = malloc(*n + extra);
  protobuf_c_message_pack(m, b);
  return b;
}

static void garbage_on_socket(void) {
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  memcpy(sa.sun_path, t.sock, strlen(t.sock) + 1);
  CHECK(connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0, "connect %s", t.sock);
  char junk[4096];
  for (size_t i = 0; i < sizeof junk; i++) junk[i] = (char)(i * 131 + 7);
  CHECK(write(fd, junk, sizeof junk) > 0, "write junk");
  struct pollfd p = {fd, POLLIN, 0};
  poll(&p, 1, 2000); // the server answers with a GOAWAY or closes
  close(fd);
  cases++;
}

static void serving(const char *after) {
  Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
  ProtobufCMessage *reply;
  rpc_status st;
  int rc = rpc_unary(t.r, "/grpc.health.v1.Health/Check", &req.base, &grpc__health__v1__health_check_response__descriptor,
                     &reply, 10000, &st);
  CHECK(rc == 0, "health check after %s: %s %s", after, rpc_code_name(st.code), st.msg);
  CHECK(((Grpc__Health__V1__HealthCheckResponse *)reply)->status == GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING,
        "not SERVING after %s", after);
  protobuf_c_message_free_unpacked(reply, NULL);
}

int main(void) {
  td_init(&t);
  td_start(&t);
  jobfile = td_jobfile("good.yaml", 100000, 1000, NULL);
  char p[1024];

  // ---- fields of the spec ----
  submit_with("spec.training.batch_size", "-3", GRPC_STATUS_INVALID_ARGUMENT, "spec.training.batch_size");
  submit_with("spec.training.batch_size", "0", GRPC_STATUS_INVALID_ARGUMENT, "spec.training.batch_size");
  submit_with("spec.training.seq_len", "100000000", GRPC_STATUS_INVALID_ARGUMENT, "spec.training.seq_len");
  submit_with("spec.training.seq_len", "600", GRPC_STATUS_INVALID_ARGUMENT, "spec.training.seq_len");
  submit_with("spec.training.lr", "-1", GRPC_STATUS_INVALID_ARGUMENT, "spec.training.lr");
  submit_with("spec.training.lr", "nan", GRPC_STATUS_INVALID_ARGUMENT, "spec.training.lr");
  submit_with("spec.training.steps", "0", GRPC_STATUS_INVALID_ARGUMENT, "spec.training.steps");
  submit_with("spec.training.tokens", "-100", GRPC_STATUS_INVALID_ARGUMENT, "spec.training.tokens");
  submit_with("spec.training.micro_batches", "3", GRPC_STATUS_INVALID_ARGUMENT, "spec.training.micro_batches");
  submit_with("spec.training.optimizer", "7", GRPC_STATUS_INVALID_ARGUMENT, "spec.training.optimizer");
  submit_with("spec.training.schedule", "99", GRPC_STATUS_INVALID_ARGUMENT, "spec.training.schedule");
  submit_with("spec.training.beta2", "1", GRPC_STATUS_INVALID_ARGUMENT, "spec.training.beta2");
  submit_with("spec.training.warmup_steps", "-5", GRPC_STATUS_INVALID_ARGUMENT, "spec.training.warmup_steps");
  submit_with("spec.training.min_lr", "1", GRPC_STATUS_INVALID_ARGUMENT, "spec.training.min_lr");
  submit_with("spec.model.config.arch", "9", GRPC_STATUS_INVALID_ARGUMENT, "spec.model.config.arch");
  submit_with("spec.data.format", "9", GRPC_STATUS_INVALID_ARGUMENT, "spec.data.format");
  submit_with("spec.data.format", "chat", GRPC_STATUS_INVALID_ARGUMENT, "spec.data.format"); // no hf_dir
  submit_with("spec.data.chat_template", "vicuna", GRPC_STATUS_INVALID_ARGUMENT, "spec.data.chat_template");
  submit_with("spec.model.config.num_key_value_heads", "3", GRPC_STATUS_INVALID_ARGUMENT, "num_key_value_heads");
  submit_with("spec.model.config.hidden_size", "-64", GRPC_STATUS_INVALID_ARGUMENT, "spec.model.config.hidden_size");
  submit_with("spec.model.config.vocab_size", "0", GRPC_STATUS_INVALID_ARGUMENT, "spec.model.config.vocab_size");
  submit_with("spec.model.config.num_hidden_layers", "100000", GRPC_STATUS_INVALID_ARGUMENT, "num_hidden_layers");
  submit_with("spec.data.eval_every", "5", GRPC_STATUS_INVALID_ARGUMENT, "spec.data.eval_every");
  submit_with("spec.checkpoints.keep", "5000", GRPC_STATUS_INVALID_ARGUMENT, "spec.checkpoints.keep");
  submit_with("spec.device.memory_bytes", "1024", GRPC_STATUS_INVALID_ARGUMENT, "spec.device.memory_bytes");
  submit_with("spec.device.memory_bytes", "2M", GRPC_STATUS_INVALID_ARGUMENT, "spec.device.memory_bytes");
  submit_with("spec.device.gpu", "0", GRPC_STATUS_FAILED_PRECONDITION, "spec.device.gpu");
  submit_with("spec.device.cpu", "false", GRPC_STATUS_INVALID_ARGUMENT, "spec.device.cpu");
  submit_with("spec.device.boundaries", "12", GRPC_STATUS_INVALID_ARGUMENT, "spec.device.boundaries");
  submit_with("priority", "5000", GRPC_STATUS_INVALID_ARGUMENT, "priority");
  submit_with("request_id", "bad id!", GRPC_STATUS_INVALID_ARGUMENT, "request_id");
  submit_with("spec.name", "tab\there", GRPC_STATUS_INVALID_ARGUMENT, "spec.name");

  // ---- paths ----
  submit_with("spec.data.train_path", "/etc/passwd", GRPC_STATUS_INVALID_ARGUMENT, "not found under the data roots");
  snprintf(p, sizeof p, "%s/escape.txt", tmp_path("data"));
  CHECK(symlink("/etc/hostname", p) == 0, "symlink");
  submit_with("spec.data.train_path", p, GRPC_STATUS_INVALID_ARGUMENT, "not found under the data roots");
  submit_with("spec.data.train_path", "data/demo/licenses.txt", GRPC_STATUS_INVALID_ARGUMENT, "not an absolute path");
  snprintf(p, sizeof p, "%s/missing.txt", tmp_path("data"));
  submit_with("spec.data.train_path", p, GRPC_STATUS_INVALID_ARGUMENT, "spec.data.train_path");
  submit_with("spec.data.train_path", tmp_path("data"), GRPC_STATUS_INVALID_ARGUMENT, "not a regular file");
  submit_with("spec.model.hf_dir", "/tmp", GRPC_STATUS_INVALID_ARGUMENT, "spec.model.hf_dir");
  submit_with("spec.model.hf_dir", tmp_path("data"), GRPC_STATUS_INVALID_ARGUMENT, "spec.model.hf_dir"); // no config.json

  // ---- message shape ----
  Traind__V1__SubmitJobRequest *r = good();
  Traind__V1__ModelSpec *model = r->spec->model;
  r->spec->model = NULL;
  rpc_status st;
  expect(call(&r->base, SUBMIT, &traind__v1__submit_job_response__descriptor, &st), &st, GRPC_STATUS_INVALID_ARGUMENT,
         "spec.model: required", "SubmitJob without a model");
  r->spec->model = model;
  Traind__V1__JobSpec *spec = r->spec;
  r->spec = NULL;
  expect(call(&r->base, SUBMIT, &traind__v1__submit_job_response__descriptor, &st), &st, GRPC_STATUS_INVALID_ARGUMENT,
         "spec: required", "SubmitJob without a spec");
  r->spec = spec;
  size_t n;
  uint8_t *b = packed(&r->base, &n, 3);
  b[n] = 0x98, b[n + 1] = 0x06, b[n + 2] = 0x01; // field 99, varint 1
  submit_raw(b, n + 3, GRPC_STATUS_INVALID_ARGUMENT, "field number 99", "SubmitJob with an unknown field");
  free(b);
  char *name = r->spec->name;
  r->spec->name = "bad \xff\xfe utf-8";
  b = packed(&r->base, &n, 0);
  submit_raw(b, n, GRPC_STATUS_INVALID_ARGUMENT, "spec.name: not valid UTF-8", "SubmitJob with invalid UTF-8");
  free(b);
  r->spec->name = name;
  protobuf_c_message_free_unpacked(&r->base, NULL);
  const char garbage[] = "\xff\xff\xff\xff this is not protobuf";
  submit_raw(garbage, sizeof garbage, GRPC_STATUS_INVALID_ARGUMENT, "request: not a valid", "SubmitJob of garbage");
  size_t big = 2 << 20;
  char *huge = calloc(1, big);
  submit_raw(huge, big, GRPC_STATUS_RESOURCE_EXHAUSTED, NULL, "a 2 MiB message");
  free(huge);

  // ---- other methods ----
  Traind__V1__GetJobRequest g = K(GET_JOB_REQUEST__INIT);
  expect(call(&g.base, "/traind.v1.Trainer/GetJob", &traind__v1__job__descriptor, &st), &st,
         GRPC_STATUS_INVALID_ARGUMENT, "job_id: required", "GetJob without a job_id");
  g.job_id = "../../etc";
  expect(call(&g.base, "/traind.v1.Trainer/GetJob", &traind__v1__job__descriptor, &st), &st,
         GRPC_STATUS_INVALID_ARGUMENT, "job_id", "GetJob of a path");
  g.job_id = "jnosuchjob0";
  expect(call(&g.base, "/traind.v1.Trainer/GetJob", &traind__v1__job__descriptor, &st), &st, GRPC_STATUS_NOT_FOUND,
         "job_id", "GetJob of an unknown job");
  Traind__V1__CancelJobRequest cj = K(CANCEL_JOB_REQUEST__INIT);
  cj.job_id = "jnosuchjob0";
  expect(call(&cj.base, "/traind.v1.Trainer/CancelJob", &traind__v1__job__descriptor, &st), &st,
         GRPC_STATUS_NOT_FOUND, "job_id", "CancelJob of an unknown job");
  Traind__V1__ListJobsRequest l = K(LIST_JOBS_REQUEST__INIT);
  l.page_size = -1;
  expect(call(&l.base, "/traind.v1.Trainer/ListJobs", &traind__v1__list_jobs_response__descriptor, &st), &st,
         GRPC_STATUS_INVALID_ARGUMENT, "page_size", "ListJobs with a negative page size");
  l.page_size = 0;
  Traind__V1__JobState bad_state = 42;
  l.n_states = 1;
  l.states = &bad_state;
  expect(call(&l.base, "/traind.v1.Trainer/ListJobs", &traind__v1__list_jobs_response__descriptor, &st), &st,
         GRPC_STATUS_INVALID_ARGUMENT, "states[0]", "ListJobs with an unknown state");
  Traind__V1__WatchJobRequest w = K(WATCH_JOB_REQUEST__INIT);
  w.job_id = "jnosuchjob0";
  rpc_stream *s;
  ProtobufCMessage *m;
  CHECK(rpc_stream_open(t.r, "/traind.v1.Trainer/WatchJob", &w.base, 10000, &s, &st) == 0, "open watch");
  CHECK(rpc_stream_next(s, &traind__v1__job_event__descriptor, &m, &st) == 0, "a watch of an unknown job sent events");
  expect(st.code, &st, GRPC_STATUS_NOT_FOUND, "job_id", "WatchJob of an unknown job");
  rpc_stream_close(s);
  Grpc__Health__V1__HealthCheckRequest h = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
  h.service = "no.such.Service";
  expect(call(&h.base, "/grpc.health.v1.Health/Check", &grpc__health__v1__health_check_response__descriptor, &st), &st,
         GRPC_STATUS_NOT_FOUND, "service", "health check of an unknown service");
  expect(call(&g.base, "/traind.v1.Trainer/NoSuchMethod", &traind__v1__job__descriptor, &st), &st,
         GRPC_STATUS_UNIMPLEMENTED, "NoSuchMethod", "an unknown method");

  // ---- a running job: export before its first checkpoint, a watcher that leaves ----
  const char *id = td_submit(&t, jobfile, NULL);
  char job[80];
  snprintf(job, sizeof job, "%s", id);
  Traind__V1__ExportJobRequest ex = K(EXPORT_JOB_REQUEST__INIT);
  ex.job_id = job;
  ex.step = -1;
  expect(call(&ex.base, "/traind.v1.Trainer/ExportJob", &traind__v1__export_chunk__descriptor, &st), &st,
         GRPC_STATUS_INVALID_ARGUMENT, "step", "ExportJob of a negative step");
  ex.step = 0;
  CHECK(rpc_stream_open(t.r, "/traind.v1.Trainer/ExportJob", &ex.base, 10000, &s, &st) == 0, "open export");
  CHECK(rpc_stream_next(s, &traind__v1__export_chunk__descriptor, &m, &st) == 0, "an export without checkpoint sent data");
  expect(st.code, &st, GRPC_STATUS_FAILED_PRECONDITION, "no checkpoint", "ExportJob before the first checkpoint");
  rpc_stream_close(s);
  w.job_id = job;
  CHECK(rpc_stream_open(t.r, "/traind.v1.Trainer/WatchJob", &w.base, 0, &s, &st) == 0, "open watch");
  CHECK(rpc_stream_next(s, &traind__v1__job_event__descriptor, &m, &st) == 1, "no event from a watch");
  protobuf_c_message_free_unpacked(m, NULL);
  rpc_stream_close(s); // leaves mid-stream
  cases++;
  garbage_on_socket();
  serving("garbage on the socket and a watcher that left");
  CHECK(td_ctl(&t, NULL, 0, "cancel %s", job) == 0, "cancel %s", job);
  Traind__V1__Job *done = td_wait_done(&t, job, 60);
  CHECK(done->state == K(JOB_STATE__JOB_STATE_CANCELLED), "job %s ended %d", job, done->state);
  protobuf_c_message_free_unpacked(&done->base, NULL);
  serving("all of it");
  printf("%d malformed requests refused with the right status and field; the daemon kept serving\n", cases);
  CHECK(cases >= 25, "only %d cases", cases);
  td_finish(&t);
  return 0;
}
