// ListJobs never walks a large table in one call (issue 14): with 4200 jobs
// queued, a filter that matches none of them answers in short pages, each
// having looked at 4096 jobs at most, and following the tokens reaches the
// end; an unfiltered page is full. Meanwhile GetNode keeps answering.
#define _GNU_SOURCE
#include "e2e/daemon.h"
#include "jobfile.h"
#include "pbset.h"

#define K(x) TRAIND__V1__##x

enum { JOBS = 4200 };

static td t;

static Traind__V1__ListJobsResponse *list(Traind__V1__JobState *states, size_t n_states, int page_size,
                                          const char *token) {
  Traind__V1__ListJobsRequest req = K(LIST_JOBS_REQUEST__INIT);
  req.n_states = n_states;
  req.states = states;
  req.page_size = page_size;
  req.page_token = (char *)token;
  ProtobufCMessage *reply;
  rpc_status st;
  int rc = rpc_unary(t.r, "/traind.v1.Trainer/ListJobs", &req.base, &traind__v1__list_jobs_response__descriptor,
                     &reply, 30000, &st);
  CHECK(rc == 0, "ListJobs: %s %s", rpc_code_name(st.code), st.msg);
  return (Traind__V1__ListJobsResponse *)reply;
}

int main(void) {
  td_init(&t);
  td_start(&t);
  Traind__V1__SubmitJobRequest *r = (Traind__V1__SubmitJobRequest *)pbset_new(&traind__v1__submit_job_request__descriptor);
  char err[512];
  CHECK(jobfile_load(r, td_jobfile("long.yaml", 1000000, 1000, NULL), err, sizeof err) == 0, "%s", err);
  for (int i = 0; i < JOBS; i++) { // the first runs, the rest wait
    ProtobufCMessage *reply;
    rpc_status st;
    int rc = rpc_unary(t.r, "/traind.v1.Trainer/SubmitJob", &r->base, &traind__v1__submit_job_response__descriptor,
                       &reply, 30000, &st);
    CHECK(rc == 0, "SubmitJob %d: %s %s", i, rpc_code_name(st.code), st.msg);
    protobuf_c_message_free_unpacked(reply, NULL);
  }
  protobuf_c_message_free_unpacked(&r->base, NULL);

  // None has succeeded: the walk takes more than one call.
  Traind__V1__JobState done = K(JOB_STATE__JOB_STATE_SUCCEEDED);
  int calls = 0;
  size_t found = 0;
  char token[80] = "";
  do {
    Traind__V1__ListJobsResponse *p = list(&done, 1, 100, token);
    calls++;
    found += p->n_jobs;
    snprintf(token, sizeof token, "%s", p->next_page_token);
    protobuf_c_message_free_unpacked(&p->base, NULL);
    CHECK(calls <= 3, "more calls than the walk needs");
  } while (*token);
  CHECK(found == 0 && calls == 2, "a filter matching none of %d jobs: %zu jobs in %d calls (want 0 in 2)", JOBS,
        found, calls);

  // Unfiltered, a page is full and says where to go on.
  Traind__V1__ListJobsResponse *p = list(NULL, 0, 1000, "");
  CHECK(p->n_jobs == 1000 && *p->next_page_token, "an unfiltered page of 1000 held %zu jobs", p->n_jobs);
  protobuf_c_message_free_unpacked(&p->base, NULL);
  char out[4096];
  CHECK(td_ctl(&t, out, sizeof out, "node") == 0 && strstr(out, "queued"), "trainctl node: %s", out);
  printf("%d jobs: a filter matching none answered in %d calls\n", JOBS, calls);
  td_finish(&t);
  printf("ok\n");
  return 0;
}
