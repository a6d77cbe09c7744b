// SubmitJob is idempotent on request_id: a retry returns the job the first
// call created — sent again after the answer, sent concurrently with the
// original, sent after the original's deadline expired, sent after a daemon
// restart — and the same id with a different request is ALREADY_EXISTS.
#define _GNU_SOURCE
#include <pthread.h>

#include "e2e/daemon.h"
#include "jobfile.h"
#include "pbset.h"

#define K(x) TRAIND__V1__##x
#define SUBMIT "/traind.v1.Trainer/SubmitJob"

static td t;
static const char *jobfile;

static Traind__V1__SubmitJobRequest *request(const char *id, const char *steps) {
  Traind__V1__SubmitJobRequest *r = (Traind__V1__SubmitJobRequest *)pbset_new(&traind__v1__submit_job_request__descriptor);
  char err[512];
  CHECK(jobfile_load(r, jobfile, err, sizeof err) == 0, "%s", err);
  CHECK(pbset(&r->base, "request_id", id, err, sizeof err) == 0, "%s", err);
  CHECK(pbset(&r->base, "spec.training.steps", steps, err, sizeof err) == 0, "%s", err);
  return r;
}

// Submits on channel r; returns the status, the job id and created.
static int submit(rpc *r, const char *id, const char *steps, int timeout_ms, char *job, int *created, rpc_status *st) {
  Traind__V1__SubmitJobRequest *req = request(id, steps);
  ProtobufCMessage *reply;
  int rc = rpc_unary(r, SUBMIT, &req->base, &traind__v1__submit_job_response__descriptor, &reply, timeout_ms, st);
  protobuf_c_message_free_unpacked(&req->base, NULL);
  if (rc) return rc;
  Traind__V1__SubmitJobResponse *resp = (Traind__V1__SubmitJobResponse *)reply;
  snprintf(job, 80, "%s", resp->job->id);
  *created = resp->created;
  protobuf_c_message_free_unpacked(reply, NULL);
  return 0;
}

static int jobs_with_request_id(const char *id) {
  Traind__V1__ListJobsRequest l = K(LIST_JOBS_REQUEST__INIT);
  l.page_size = 1000;
  ProtobufCMessage *reply;
  rpc_status st;
  CHECK(rpc_unary(t.r, "/traind.v1.Trainer/ListJobs", &l.base, &traind__v1__list_jobs_response__descriptor, &reply,
                  10000, &st) == 0, "list: %s", st.msg);
  Traind__V1__ListJobsResponse *resp = (Traind__V1__ListJobsResponse *)reply;
  int n = 0;
  for (size_t i = 0; i < resp->n_jobs; i++) n += !strcmp(resp->jobs[i]->request_id, id);
  protobuf_c_message_free_unpacked(reply, NULL);
  return n;
}

enum { THREADS = 8 };
typedef struct racer {
  pthread_t th;
  char job[80];
  int created, rc;
} racer;
static pthread_barrier_t start;

static void *race(void *arg) {
  racer *x = arg;
  rpc *r;
  char err[256];
  CHECK(rpc_open(&r, t.sock, NULL, err, sizeof err) == 0, "%s", err);
  rpc_status st;
  Traind__V1__GetNodeRequest g = K(GET_NODE_REQUEST__INIT); // connect before the race
  ProtobufCMessage *reply;
  CHECK(rpc_unary(r, "/traind.v1.Trainer/GetNode", &g.base, &traind__v1__node__descriptor, &reply, 10000, &st) == 0,
        "node");
  protobuf_c_message_free_unpacked(reply, NULL);
  pthread_barrier_wait(&start);
  x->rc = submit(r, "race-1", "5", 10000, x->job, &x->created, &st);
  rpc_close(r);
  return NULL;
}

int main(void) {
  td_init(&t);
  td_start(&t);
  jobfile = td_jobfile("idem.yaml", 5, 5, NULL);
  char a[80], b[80];
  int created;
  rpc_status st;

  CHECK(submit(t.r, "req-1", "5", 10000, a, &created, &st) == 0 && created, "first submit: %s", st.msg);
  CHECK(submit(t.r, "req-1", "5", 10000, b, &created, &st) == 0 && !created && !strcmp(a, b),
        "a retry gave job %s (created %d), the first call %s", b, created, a);
  CHECK(submit(t.r, "req-1", "6", 10000, b, &created, &st) == GRPC_STATUS_ALREADY_EXISTS && strstr(st.msg, "request_id"),
        "the same id with another spec: %s %s", rpc_code_name(st.code), st.msg);
  printf("retry after the answer: same job; another spec: ALREADY_EXISTS (%s)\n", st.msg);

  racer x[THREADS];
  pthread_barrier_init(&start, NULL, THREADS);
  for (int i = 0; i < THREADS; i++) pthread_create(&x[i].th, NULL, race, &x[i]);
  int n_created = 0;
  for (int i = 0; i < THREADS; i++) {
    pthread_join(x[i].th, NULL);
    CHECK(x[i].rc == 0, "racer %d failed", i);
    CHECK(!strcmp(x[i].job, x[0].job), "racers got jobs %s and %s", x[0].job, x[i].job);
    n_created += x[i].created;
  }
  CHECK(n_created == 1 && jobs_with_request_id("race-1") == 1, "%d racers created a job", n_created);
  printf("%d concurrent submits with one request id: one job (%s)\n", THREADS, x[0].job);

  // The first attempt gives up after 1 ms; whether or not the daemon had
  // created the job by then, the retry finds exactly one.
  int rc = submit(t.r, "late-1", "5", 1, a, &created, &st);
  CHECK(rc == 0 || rc == GRPC_STATUS_DEADLINE_EXCEEDED, "first attempt: %s", st.msg);
  usleep(200000);
  CHECK(submit(t.r, "late-1", "5", 10000, b, &created, &st) == 0, "retry after the deadline: %s", st.msg);
  CHECK(rc != 0 || !strcmp(a, b), "the retry gave another job");
  CHECK(jobs_with_request_id("late-1") == 1, "%d jobs for one request id", jobs_with_request_id("late-1"));
  printf("retry after a %s first attempt: one job (%s)\n", rc ? "DEADLINE_EXCEEDED" : "completed", b);

  td_stop(&t, SIGTERM, 30, NULL);
  td_start(&t);
  CHECK(submit(t.r, "req-1", "5", 10000, b, &created, &st) == 0 && !created, "retry after a restart: %s", st.msg);
  CHECK(jobs_with_request_id("req-1") == 1, "the restart duplicated req-1");
  printf("retry after a daemon restart: same job (%s)\n", b);
  td_finish(&t);
  return 0;
}
