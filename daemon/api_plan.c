// PlanJob: the plan the planner would run a job with, without running it.
// Calibration (the first time a job shape is seen) and the solve take
// seconds, so they run on the libuv thread pool; the loop answers.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "planning.h"
#include "sizing.h"
#include "spec.h"

#define T(x) Traind__V1__##x // types

typedef struct plan_ctx {
  uv_work_t work;
  srv_call *c;   // NULL once the call is over
  traind *d;
  spec_plan sp;  // the engine's view of the spec: config, batch, seq_len, cap
  int pool;      // the work is on the pool (it holds x)
  int rc;
  eng_err e;
  eng_plan plan;
  int max_batch;
  char *json, *table, *svg;
  double flops, gpu_hours; // sizing (sizing.h) when either is set
  eng_scaling_fit fit;
  char fit_name[64];
  sizing z;
} plan_ctx;

static void ctx_free(plan_ctx *x) {
  spec_plan_free(&x->sp);
  if (!x->rc) eng_plan_free(&x->plan);
  free(x->json);
  free(x->table);
  free(x->svg);
  free(x);
}

static void on_close(srv_call *c, void *app) {
  (void)c;
  plan_ctx *x = app;
  x->c = NULL;
  if (!x->pool) ctx_free(x);
}

static void plan_work(uv_work_t *w) {
  plan_ctx *x = w->data;
  x->rc = x->flops > 0 || x->gpu_hours > 0
              ? sizing_make(x->d->planning, &x->sp.eng, &x->fit, x->flops, x->gpu_hours, &x->z, &x->plan, &x->svg, &x->e)
              : planning_make(x->d->planning, &x->sp.eng, &x->plan, &x->max_batch, &x->svg, &x->e);
  if (x->rc) return;
  if (eng_plan_to_json(&x->plan, &x->json, &x->e) || eng_plan_table(&x->plan, &x->table, &x->e)) {
    eng_plan_free(&x->plan);
    x->rc = x->e.code ? x->e.code : ENG_ENOMEM;
  }
}

static void plan_done(uv_work_t *w, int status) {
  (void)status;
  plan_ctx *x = w->data;
  x->pool = 0;
  if (!x->c) {
    ctx_free(x);
    return;
  }
  srv_call *c = x->c;
  if (x->rc == ENG_ECAP) {
    srv_fail(c, GRPC_STATUS_FAILED_PRECONDITION, "the job does not fit: %s", x->e.msg);
  } else if (x->rc == ENG_EINVAL) {
    srv_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "%s", x->e.msg);
  } else if (x->rc) {
    srv_fail(c, GRPC_STATUS_INTERNAL, "planning failed: %s", x->e.msg);
  } else {
    T(PlanJobResponse) r = TRAIND__V1__PLAN_JOB_RESPONSE__INIT;
    r.summary = x->table;
    r.plan = x->json;
    r.timeline_svg = x->svg;
    r.max_batch = x->max_batch;
    r.tokens_per_s = x->plan.tokens_per_s;
    r.profile = x->plan.profile;
    T(Sizing) z = TRAIND__V1__SIZING__INIT;
    T(ModelConfig) model;
    char *skipped[SIZING_MAX_SKIPPED];
    if (x->flops > 0 || x->gpu_hours > 0) {
      z.flops = x->z.flops;
      z.fit = x->fit_name;
      z.params_optimal = x->z.params_opt;
      z.tokens_optimal = x->z.tokens_opt;
      z.loss_optimal = x->z.loss_opt;
      z.shape = x->z.shape.name;
      spec_config_to_pb(&x->z.shape.config, &model);
      z.model = &model;
      z.params = x->z.shape.params;
      z.tokens = x->z.tokens;
      z.steps = x->z.steps;
      z.wall_seconds = x->z.wall_s;
      z.loss = x->z.loss;
      for (int i = 0; i < x->z.n_skipped; i++) skipped[i] = x->z.skipped[i];
      z.skipped = skipped;
      z.n_skipped = (size_t)x->z.n_skipped;
      r.sizing = &z;
    }
    srv_reply(c, &r.base);
  }
  // The reply is packed: the call no longer needs x (on_close frees it).
}

void api_plan(srv_call *c, ProtobufCMessage *req) {
  traind *d = srv_call_data(c);
  T(PlanJobRequest) *r = (T(PlanJobRequest) *)req;
  val_err e;
  owner_access who;
  owner_access_of(srv_call_caller(c), &who);
  val_roots roots = {d->cfg.roots, d->cfg.n_roots, &who};
  eng_config model;
  spec_defaults def = {d->cfg.checkpoint_every, d->cfg.checkpoint_keep, d->cfg.cpu_memory_bytes, NULL};
  plan_ctx *x = calloc(1, sizeof *x);
  if (!x) {
    srv_fail(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "request: out of memory for a plan");
    return;
  }
  if (val_message(req, "", &e) || val_plan_sizing(r, &e) || val_spec(r->spec, "spec", &roots, &e) ||
      spec_model_config(r->spec, &roots, &model, &e) || spec_plan_build(r->spec, &model, &def, NULL, &x->sp, &e)) {
    free(x);
    api_refuse(c, &e);
    return;
  }
  x->flops = r->flops;
  x->gpu_hours = r->gpu_hours;
  snprintf(x->fit_name, sizeof x->fit_name, "%s", *r->fit ? r->fit : "chinchilla");
  eng_err fe;
  eng_scaling_parse(x->fit_name, &x->fit, &fe); // val_plan_sizing has checked it
  x->c = c;
  x->d = d;
  x->work.data = x;
  srv_on_close(c, on_close, x);
  x->pool = 1;
  if (uv_queue_work(d->loop, &x->work, plan_work, plan_done)) {
    x->pool = 0;
    srv_fail(c, GRPC_STATUS_INTERNAL, "PlanJob: cannot queue the work");
  }
}
