// The API load of tests/bench/api.sh: C concurrent clients (own channel
// each) make N SubmitJob calls in total with request ids, of which 10% are
// deliberate retries — half sent again by the same client after the answer,
// half sent by the next client at the same point of its sequence, so
// concurrently with the original — mixed with a ListJobs every 10th call.
// Then it lists every job and checks that each request id has exactly one
// job and that every call for an id got that job.
// Last line: "api: p50 <ms> ms, p99 <ms> ms, <n> lost, <n> duplicated".
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jobfile.h"
#include "pbset.h"
#include "rpc.h"

#include "bench.h"

#define K(x) TRAIND__V1__##x

static const char *addr, *jobfile;
static int clients, unique;
static char (*job_of)[80];        // per request id: the job the first answer named
static int *mismatch;             // per request id: answers that named another job
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

typedef struct worker {
  pthread_t th;
  int index;
  double *lat;   // seconds per submit
  int n_lat, failed;
} worker;

static int submit(rpc *r, Traind__V1__SubmitJobRequest *req, int id, worker *w) {
  char rid[32], err[256];
  snprintf(rid, sizeof rid, "bench-%d", id);
  pbset(&req->base, "request_id", rid, err, sizeof err);
  ProtobufCMessage *reply;
  rpc_status st;
  double t0 = eng_now();
  int rc = rpc_unary(r, "/traind.v1.Trainer/SubmitJob", &req->base, &traind__v1__submit_job_response__descriptor,
                     &reply, 60000, &st);
  w->lat[w->n_lat++] = eng_now() - t0;
  if (rc) {
    fprintf(stderr, "api_load: submit %s: %s %s\n", rid, rpc_code_name(st.code), st.msg);
    w->failed++;
    return -1;
  }
  const char *job = ((Traind__V1__SubmitJobResponse *)reply)->job->id;
  pthread_mutex_lock(&lock);
  if (!job_of[id][0]) snprintf(job_of[id], sizeof job_of[id], "%s", job);
  else if (strcmp(job_of[id], job)) mismatch[id]++;
  pthread_mutex_unlock(&lock);
  protobuf_c_message_free_unpacked(reply, NULL);
  return 0;
}

static void list_some(rpc *r) {
  Traind__V1__ListJobsRequest l = K(LIST_JOBS_REQUEST__INIT);
  l.page_size = 100;
  ProtobufCMessage *reply;
  rpc_status st;
  if (rpc_unary(r, "/traind.v1.Trainer/ListJobs", &l.base, &traind__v1__list_jobs_response__descriptor, &reply, 60000,
                &st) == 0)
    protobuf_c_message_free_unpacked(reply, NULL);
  else fprintf(stderr, "api_load: list: %s %s\n", rpc_code_name(st.code), st.msg);
}

// Ids i with i % clients == index, in order; id i is retried by its own
// client when i % 20 == 1, and sent concurrently by the next client when
// i % 20 == 2 (that client handles it at the same position of its loop).
static void *work(void *arg) {
  worker *w = arg;
  rpc *r;
  char err[256];
  if (rpc_open(&r, addr, NULL, err, sizeof err)) {
    fprintf(stderr, "api_load: %s\n", err);
    return NULL;
  }
  Traind__V1__SubmitJobRequest *req = (Traind__V1__SubmitJobRequest *)pbset_new(&traind__v1__submit_job_request__descriptor);
  if (jobfile_load(req, jobfile, err, sizeof err)) {
    fprintf(stderr, "api_load: %s\n", err);
    return NULL;
  }
  int prev = (w->index + clients - 1) % clients, calls = 0;
  for (int base = 0; base < unique; base += clients) {
    int mine = base + w->index, theirs = base + prev;
    if (mine < unique) {
      submit(r, req, mine, w);
      if (mine % 20 == 1) submit(r, req, mine, w);
    }
    if (theirs < unique && theirs % 20 == 2) submit(r, req, theirs, w);
    if (++calls % 10 == 0) list_some(r);
  }
  protobuf_c_message_free_unpacked(&req->base, NULL);
  rpc_close(r);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: api_load ADDR JOBFILE CLIENTS SUBMITS\n");
    return 2;
  }
  addr = argv[1];
  jobfile = argv[2];
  clients = atoi(argv[3]);
  int submits = atoi(argv[4]);
  unique = submits * 10 / 11; // + 10% retries = submits
  job_of = calloc((size_t)unique, sizeof *job_of);
  mismatch = calloc((size_t)unique, sizeof *mismatch);
  worker *ws = calloc((size_t)clients, sizeof *ws);
  double t0 = eng_now();
  for (int i = 0; i < clients; i++) {
    ws[i].index = i;
    ws[i].lat = calloc((size_t)unique / clients * 2 + 16, sizeof(double));
    pthread_create(&ws[i].th, NULL, work, &ws[i]);
  }
  int n = 0, failed = 0;
  for (int i = 0; i < clients; i++) {
    pthread_join(ws[i].th, NULL);
    n += ws[i].n_lat;
    failed += ws[i].failed;
  }
  double took = eng_now() - t0;
  double *lat = malloc((size_t)n * sizeof *lat);
  for (int i = 0, k = 0; i < clients; i++)
    for (int j = 0; j < ws[i].n_lat; j++) lat[k++] = ws[i].lat[j];
  bench_sort(lat, n);

  // Every job the daemon has, by request id.
  rpc *r;
  char err[256];
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
