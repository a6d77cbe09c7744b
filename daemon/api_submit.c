// SubmitJob: validate, deduplicate on request_id, resolve the model, size the
// job, save it, queue it.
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "compute/scaling.h"
#include "log.h"
#include "model/layout.h"
#include "spec.h"

#define T(x) Traind__V1__##x   // types
#define K(x) TRAIND__V1__##x   // constants

// The same request_id again. The loop handles one call at a time, so a
// retry that arrives while the first call is still being answered finds
// the job that call created.
static void retry(srv_call *c, const T(SubmitJobRequest) *r, const job *j) {
  size_t n1, n2;
  uint8_t *a = job_submission_bytes(r, &n1), *b = job_own_submission_bytes(j, &n2);
  int same = a && b && n1 == n2 && !memcmp(a, b, n1);
  free(a);
  free(b);
  if (!a || !b) srv_fail(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "request: out of memory comparing it");
  else if (same) api_reply_durable(c, j, 1, 0, NULL, 0); // the first call's answer may still wait for the disk
  else
    srv_fail(c, GRPC_STATUS_ALREADY_EXISTS, "request_id: \"%s\" was used for job %s with a different request",
             r->request_id, j->id);
}

// A model trained from scratch whose tokens per parameter are far from the
// compute-optimal ratio for its budget gets a warning (never a refusal): it
// may mean to, a fine-tune from a model directory certainly does. It goes
// into the "submitted" event, so a submission writes no more than before.
static void advise_size(const job *j, char *reason, size_t n) {
  if (j->spec->model->source_case != TRAIND__V1__MODEL_SPEC__SOURCE_CONFIG) return;
  eng_layout lo;
  eng_layout_init(&lo, &j->model);
  const Traind__V1__TrainingSpec *t = j->spec->training;
  const Traind__V1__BudgetSpec *b = j->spec->budget;
  double N = (double)lo.total_numel, D = (double)j->progress.total_steps * t->batch_size * t->seq_len;
  if (b && b->max_tokens > 0 && b->max_tokens < D) D = (double)b->max_tokens;
  if (b && b->max_flops > 0 && b->max_flops / (6 * N) < D) D = b->max_flops / (6 * N);
  // Submissions of one kind (a sweep's, a load test's) ask the same
  // question again: the last answer is kept (its eleven numbers took a
  // sixth of a submission's time on the loop to format).
  static double last_N = -1, last_D = -1;
  static int warn;
  static char msg[512];
  if (N != last_N || D != last_D) warn = eng_scaling_advise(&eng_scaling_chinchilla, N, D, msg, sizeof msg);
  last_N = N, last_D = D;
  if (warn) snprintf(reason, n, "submitted; warning: %s", msg);
}

void api_submit(srv_call *c, ProtobufCMessage *req) {
  traind *d = srv_call_data(c);
  T(SubmitJobRequest) *r = (T(SubmitJobRequest) *)req;
  val_err e;
  if (val_submit_head(r, &e)) {
    api_refuse(c, &e);
    return;
  }
  char owner[OWNER_MAX];
  owner_name(srv_call_caller(c), owner);
  job *old = *r->request_id ? job_find_request(d, owner, r->request_id) : NULL;
  if (old) {
    retry(c, r, old);
    return;
  }
  if (d->draining) {
    srv_fail(c, GRPC_STATUS_UNAVAILABLE, "traind is shutting down; submit again after its restart");
    return;
  }
  if (d->n_queued >= d->cfg.max_queued_jobs) {
    srv_fail(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "queue: %d jobs are queued, the limit (max_queued_jobs); submit again "
             "once some have run", d->n_queued);
    return;
  }

  owner_access who;
  owner_access_of(srv_call_caller(c), &who);
  val_roots roots = {d->cfg.roots, d->cfg.n_roots, &who};
  eng_config model;
  spec_plan plan;
  spec_defaults def = {d->cfg.checkpoint_every, d->cfg.checkpoint_keep, d->cfg.cpu_memory_bytes, NULL};
  if (val_submit(r, &roots, &e) || spec_model_config(r->spec, &roots, &model, &e) ||
      spec_plan_build(r->spec, &model, &def, NULL, &plan, &e)) {
    api_refuse(c, &e);
    return;
  }
  int64_t total = plan.total_steps;
  spec_plan_free(&plan);

  job *j = job_new(d, r, owner, &model);
  if (j) j->owner_gid = who.gid;
  if (!j || job_insert(d, j)) {
    if (j) { // not indexed: give the spec back to the call, which frees it
      r->spec = j->spec;
      free(j->request_id);
      free(j->request_key);
      free(j);
    }
    srv_fail(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "request: out of memory");
    return;
  }
  job_touch(j);
  j->progress.total_steps = total;
  eng_err ee = {0};
  uint8_t *record;
  size_t record_n;
  if (job_save_keep(d, j, &record, &record_n, &ee)) {
    log_err("job %s: saving it failed: %s", j->id, ee.msg);
    eng_err ignored;
    job_delete(d, j, &ignored);
    srv_fail(c, GRPC_STATUS_UNAVAILABLE, "storage: %s", ee.msg);
    return;
  }
  sched_enqueue(d, j);
  char reason[640] = "submitted";
  advise_size(j, reason, sizeof reason);
  event_state(d, j, reason);
  log_info("job %s: submitted by %s%s%s (priority %d)", j->id, j->owner, j->request_id ? " with request id " : "",
           j->request_id ? j->request_id : "", j->priority);
  api_reply_durable(c, j, 1, 1, record, record_n);
  if (j->preempt) sched_preempt_for(d, j);
  sched_kick(d);
  notify_status(d);
}
