// GetJob, ListJobs, CancelJob, GetTimeline, and the helpers every method shares.
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "commit.h"
#include "log.h"

#define T(x) Traind__V1__##x   // types
#define K(x) TRAIND__V1__##x   // constants

void api_refuse(srv_call *c, const val_err *e) { srv_fail(c, e->code, "%s", e->msg); }

job *api_job(srv_call *c, traind *d, const char *job_id) {
  val_err e;
  if (val_id(job_id, "job_id", &e)) {
    api_refuse(c, &e);
    return NULL;
  }
  job *j = job_find(d, job_id);
  // Another owner's job is answered as an unknown one: its id says nothing.
  if (j && !owner_may(d, srv_call_caller(c), j)) j = NULL;
  if (!j) srv_fail(c, GRPC_STATUS_NOT_FOUND, "job_id: no job \"%s\"", job_id);
  return j;
}

job *api_job_of(srv_call *c, ProtobufCMessage *req, const char *job_id) {
  val_err e;
  if (val_message(req, "", &e)) {
    api_refuse(c, &e);
    return NULL;
  }
  return api_job(c, srv_call_data(c), job_id);
}

void api_reply_job(srv_call *c, const job *j) {
  T(Job) pb;
  T(ModelConfig) model;
  T(Progress) progress;
  job_pb(j, 1, &pb, &model, &progress);
  srv_reply(c, &pb.base);
}

static void reply_send(void *arg) { srv_reply_send(arg); }

ProtobufCMessageUnknownField api_raw_field(const ProtobufCMessageDescriptor *d, const char *field, const uint8_t *framed,
                                           size_t n) {
  return (ProtobufCMessageUnknownField){protobuf_c_message_descriptor_get_field_by_name(d, field)->id,
                                        PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED, n, (uint8_t *)framed};
}

void api_reply_durable(srv_call *c, const job *j, int submit, int created, uint8_t *record, size_t record_n) {
  T(Job) pb;
  T(ModelConfig) model;
  T(Progress) progress;
  T(SubmitJobResponse) resp = K(SUBMIT_JOB_RESPONSE__INIT);
  resp.created = created;
  ProtobufCMessageUnknownField raw;
  if (record && submit) {
    raw = api_raw_field(&traind__v1__submit_job_response__descriptor, "job", record, record_n);
    resp.base.n_unknown_fields = 1;
    resp.base.unknown_fields = &raw;
  } else {
    job_pb(j, 1, &pb, &model, &progress);
    resp.job = &pb;
  }
  // The answer is the job as it is stored: made now, sent by the commit
  // thread once that is on the disk.
  srv_later *l = srv_reply_prepare(c, submit ? &resp.base : &pb.base);
  free(record);
  if (l && commit_when_durable_any(((traind *)srv_call_data(c))->commit, reply_send, l)) {
    log_err("job %s: out of memory waiting for its record; answered before it is on the disk", j->id);
    srv_reply_send(l);
  }
}

void api_get(srv_call *c, ProtobufCMessage *req) {
  job *j = api_job_of(c, req, ((T(GetJobRequest) *)req)->job_id);
  if (j) api_reply_job(c, j);
}

void api_timeline(srv_call *c, ProtobufCMessage *req) {
  job *j = api_job_of(c, req, ((T(GetTimelineRequest) *)req)->job_id);
  if (!j) return;
  T(Timeline) t = K(TIMELINE__INIT);
  t.job_id = j->id;
  t.step = j->timeline ? j->timeline_step : 0;
  t.measured_svg = j->timeline ? j->timeline : "";
  t.predicted_svg = j->timeline_plan ? j->timeline_plan : "";
  srv_reply(c, &t.base);
}

void api_cancel(srv_call *c, ProtobufCMessage *req) {
  T(CancelJobRequest) *r = (T(CancelJobRequest) *)req;
  traind *d = srv_call_data(c);
  job *j = api_job_of(c, req, r->job_id);
  if (!j) return;
  const char *refusal;
  if (sched_cancel(d, j, &refusal)) srv_fail(c, GRPC_STATUS_FAILED_PRECONDITION, "%s", refusal);
  else if ((j = job_find(d, r->job_id))) api_reply_durable(c, j, 0, 0, NULL, 0); // retention may have removed it already
  else srv_fail(c, GRPC_STATUS_NOT_FOUND, "job_id: job \"%s\" was cancelled and removed by retention", r->job_id);
}

// Newest first. The page token is the id of the last job the previous call
// looked at: ids only grow, so pages stay stable while jobs are submitted.
// One call looks at LIST_SCAN_MAX jobs at most, so a filter that matches few
// of a large table answers in pages (some short, even empty, with a token)
// instead of holding the loop while it walks everything.
enum { LIST_SCAN_MAX = 4096 };

void api_list(srv_call *c, ProtobufCMessage *req) {
  T(ListJobsRequest) *r = (T(ListJobsRequest) *)req;
  traind *d = srv_call_data(c);
  val_err e;
  if (val_list(r, &e)) {
    api_refuse(c, &e);
    return;
  }
  size_t page = r->page_size ? (size_t)r->page_size : 100;
  // First index (from the end) to look at: the jobs older than the token.
  size_t hi = d->n_all, lo = 0;
  if (*r->page_token) {
    while (lo < hi) {
      size_t mid = (lo + hi) / 2;
      if (strcmp(d->all[mid]->id, r->page_token) < 0) lo = mid + 1;
      else hi = mid;
    }
  }
  // Without specs the jobs go in as their cached encodings (job_view), as
  // raw elements of the jobs field; with them, each is encoded here.
  int raw = !r->include_spec;
  ProtobufCMessageUnknownField *views = raw ? calloc(page, sizeof *views) : NULL;
  T(Job) *pbs = raw ? NULL : calloc(page, sizeof *pbs);
  T(Job) **ptrs = raw ? NULL : calloc(page, sizeof *ptrs);
  T(ModelConfig) *models = raw ? NULL : calloc(page, sizeof *models);
  T(Progress) *progs = raw ? NULL : calloc(page, sizeof *progs);
  if (raw ? !views : !pbs || !ptrs || !models || !progs) {
    srv_fail(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "page_size: out of memory for %zu jobs", page);
    goto out;
  }
  const srv_caller *who = srv_call_caller(c);
  int admin = owner_admin(d, who);
  char me[OWNER_MAX];
  owner_name(who, me);
  size_t n = 0, i = hi, scanned = 0;
  while (i > 0 && n < page && scanned < LIST_SCAN_MAX) {
    job *j = d->all[--i];
    scanned++;
    if (!admin && (!*j->owner || strcmp(j->owner, me))) continue;
    int match = r->n_states == 0;
    for (size_t k = 0; k < r->n_states && !match; k++) match = (job_state)r->states[k] == j->state;
    if (!match) continue;
    if (raw) {
      size_t len;
      const uint8_t *v = job_view(j, &len);
      if (!v) {
        srv_fail(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "page_size: out of memory for %zu jobs", page);
        goto out;
      }
      views[n] = api_raw_field(&traind__v1__list_jobs_response__descriptor, "jobs", v, len);
    } else {
      job_pb(j, 1, &pbs[n], &models[n], &progs[n]);
      ptrs[n] = &pbs[n];
    }
    n++;
  }
  T(ListJobsResponse) resp = K(LIST_JOBS_RESPONSE__INIT);
  if (raw) {
    resp.base.n_unknown_fields = (unsigned)n;
    resp.base.unknown_fields = views;
  } else {
    resp.n_jobs = n;
    resp.jobs = ptrs;
  }
  // More may follow unless the walk reached the oldest job.
  resp.next_page_token = i > 0 ? d->all[i]->id : "";
  srv_reply(c, &resp.base);
out:
  free(views);
  free(pbs);
  free(ptrs);
  free(models);
  free(progs);
}
