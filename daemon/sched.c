// The queue and the runner: priority, then first come first served; one job
// at a time per device; preemption only when a job asks for it; cancel and
// drain through the runner's flags; the runner's reports turned into job
// state, events and records.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admit.h"
#include "log.h"
#include "runner.h"
#include "spec.h"
#include "traind.h"

static char stop_reason[256];          // why the runner was asked to stop
static void (*drain_done)(traind *d);  // set while a drain waits for the runner

static const char *state_name(job_state s) {
  const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(&traind__v1__job_state__descriptor, s);
  return v ? v->name + strlen("JOB_STATE_") : "?";
}

// ---- the queue --------------------------------------------------------------------

static int before(const job *a, const job *b) {
  return a->order != b->order ? a->order < b->order : strcmp(a->id, b->id) < 0;
}

void sched_enqueue(traind *d, job *j) {
  // From the tail: a new job usually goes last among its priority.
  job *p = d->qtail;
  while (p && before(j, p)) p = p->qprev;
  j->qprev = p;
  j->qnext = p ? p->qnext : d->qhead;
  if (j->qnext) j->qnext->qprev = j;
  else d->qtail = j;
  if (p) p->qnext = j;
  else d->qhead = j;
  j->queued = 1;
  d->n_queued++;
}

void sched_dequeue(traind *d, job *j) {
  if (j->qprev) j->qprev->qnext = j->qnext;
  else d->qhead = j->qnext;
  if (j->qnext) j->qnext->qprev = j->qprev;
  else d->qtail = j->qprev;
  j->qprev = j->qnext = NULL;
  j->queued = 0;
  d->n_queued--;
}

// ---- state --------------------------------------------------------------------------

int sched_set_state(traind *d, job *j, job_state st, const char *reason) {
  job_touch(j);
  j->state = st;
  if (job_finished(j)) j->finished_ms = now_ms();
  eng_err e = {0};
  // The record first: after a crash between the two, the job is where the
  // record says, and the event log at worst lacks this one line.
  int rc = job_save(d, j, &e);
  if (rc) log_err("job %s: saving its record (%s) failed: %s", j->id, state_name(st), e.msg);
  event_state(d, j, reason);
  log_info("job %s: %s (%s)", j->id, state_name(st), reason);
  notify_status(d);
  return rc;
}

static spec_defaults defaults_of(const traind *d) {
  return (spec_defaults){d->cfg.checkpoint_every, d->cfg.checkpoint_keep, d->cfg.cpu_memory_bytes, d->cfg.state_dir};
}

static void fail(traind *d, job *j, const char *msg) {
  free(j->error);
  j->error = strdup(msg);
  sched_set_state(d, j, JS(FAILED), msg);
}

// Whether the config in force, not the job, keeps it from starting: with
// every path allowed and no default device cap it would start. Such a job
// is held in the queue, not failed: a reload took its data root away (or
// shrank cpu_memory_bytes), and another may give it back. A file that is
// gone or unreadable is the job's own problem, and fails it.
static int config_bars(traind *d, const job *j) {
  char *everything[] = {"/"};
  owner_access who;
  owner_access_of_job(j, &who);
  val_roots any = {everything, 1, &who};
  spec_defaults def = defaults_of(d);
  def.cpu_memory_bytes = INT64_MAX / 2;
  spec_plan p;
  val_err e;
  if (spec_plan_build(j->spec, &j->model, &def, &any, &p, &e)) return 0;
  spec_plan_free(&p);
  return 1;
}

static void hold(traind *d, job *j, const char *why) {
  if (!j->held) {
    event_log(d, j, "held in the queue: %s; it starts once a config reload allows it", why);
    log_warn("job %s: held in the queue under this config: %s", j->id, why);
  }
  j->held = 1;
  j->held_gen = d->config_gen;
}

void sched_kick(traind *d) {
  job *next;
  for (job *j = d->qhead; j && !d->draining && d->cpu && !runner_job(d->cpu); j = next) {
    next = j->qnext;
    if (j->held && j->held_gen == d->config_gen) continue; // no reload since it was held
    spec_plan plan;
    val_err ve;
    spec_defaults def = defaults_of(d);
    owner_access who; // the job's files are read with its owner's access
    owner_access_of_job(j, &who);
    val_roots roots = {d->cfg.roots, d->cfg.n_roots, &who};
    // Paths and roots may have changed since the submission: check again.
    if (spec_plan_build(j->spec, &j->model, &def, &roots, &plan, &ve)) {
      if (config_bars(d, j)) {
        hold(d, j, ve.msg);
      } else {
        sched_dequeue(d, j);
        fail(d, j, ve.msg);
      }
      continue;
    }
    j->held = 0;
    // What is free now, not at the submission: a job that does not fit
    // fails here rather than get the daemon OOM-killed (and again after
    // every restart). A planned job is counted with its spec's uniform
    // policy: its plan is made on the runner.
    char why[sizeof ve.msg + 4400];
    if (admit_host_memory(&plan.eng, d->cfg.host_memory_bytes, why, sizeof why)) {
      spec_plan_free(&plan);
      sched_dequeue(d, j);
      fail(d, j, why);
      continue;
    }
    // A resumed job runs the plan it was first planned with.
    if (plan.use_planner && j->plan && !(plan.plan_json = strdup(j->plan))) {
      spec_plan_free(&plan);
      log_err("job %s: out of memory starting it; it stays queued", j->id);
      return;
    }
    job_touch(j);
    j->progress.total_steps = plan.total_steps;
    j->attempts++;
    if (!j->started_ms) j->started_ms = now_ms();
    j->last_step_event_ms = 0;
    j->step_s = 0;
    if (runner_start(d->cpu, j->id, &plan, d->cfg.runner_nice, d->cfg.runner_idle)) {
      spec_plan_free(&plan);
      log_err("job %s: out of memory starting it; it stays queued", j->id);
      return;
    }
    sched_dequeue(d, j);
    char reason[128];
    snprintf(reason, sizeof reason, "started on %s (attempt %d)", j->device, j->attempts);
    sched_set_state(d, j, JS(RUNNING), reason);
  }
}

int sched_cancel(traind *d, job *j, const char **refusal) {
  static char msg[256];
  switch (j->state) {
  case JS(QUEUED):
    if (j->queued) sched_dequeue(d, j);
    sched_set_state(d, j, JS(CANCELLED), "cancelled while queued");
    retention_run(d);
    return 0;
  case JS(RUNNING): {
    // With the engine's step count at the request: the job ends within the
    // step then in flight, as its CANCELLED event's step shows.
    int64_t at = runner_cancel(d->cpu);
    char reason[96] = "cancel requested while the job was starting";
    if (at >= 0) snprintf(reason, sizeof reason, "cancel requested after step %lld", (long long)at);
    sched_set_state(d, j, JS(CANCELLING), reason);
    return 0;
  }
  case JS(CANCELLING): return 0;
  default:
    snprintf(msg, sizeof msg, "job_id: job %s has already finished (%s)", j->id, state_name(j->state));
    *refusal = msg;
    return -1;
  }
}

const char *sched_running_id(traind *d) { return d->cpu ? runner_job(d->cpu) : NULL; }

void sched_preempt_for(traind *d, job *j) {
  const char *id = sched_running_id(d);
  job *r = id ? job_find(d, id) : NULL;
  if (!r || r->state != JS(RUNNING) || r->priority >= j->priority) return;
  snprintf(stop_reason, sizeof stop_reason, "preempted by job %s (priority %d > %d)", j->id, j->priority, r->priority);
  event_log(d, r, "checkpointing to make way for job %s", j->id);
  runner_stop(d->cpu);
}

void sched_drain(traind *d, void (*done)(traind *d)) {
  d->draining = 1;
  const char *id = sched_running_id(d);
  if (!id) {
    done(d);
    return;
  }
  drain_done = done;
  job *r = job_find(d, id);
  snprintf(stop_reason, sizeof stop_reason, "the daemon is shutting down; resumes after its restart");
  if (r && r->state == JS(RUNNING)) event_log(d, r, "checkpointing: the daemon is shutting down");
  runner_stop(d->cpu);
}

void sched_abandon(traind *d) {
  const char *id = sched_running_id(d);
  job *r = id ? job_find(d, id) : NULL;
  // Back in the queue in its record: the restart must not count this as
  // the daemon dying under the job (max_crashes).
  if (r && r->state == JS(RUNNING))
    sched_set_state(d, r, JS(QUEUED), "the daemon's drain timed out before the job checkpointed; it resumes from "
                                      "its last checkpoint after the restart");
}

// ---- the runner's reports -----------------------------------------------------------

static void on_step(traind *d, job *j, const eng_metrics *m) {
  Traind__V1__Progress *p = &j->progress;
  int64_t prev = p->step;
  p->step = m->step;
  p->loss = m->loss;
  if (!isnan(m->eval_loss)) p->eval_loss = m->eval_loss;
  p->lr = m->lr;
  p->grad_norm = m->grad_norm;
  p->tokens_per_s = m->tokens_per_s;
  p->tokens_done = m->step * m->tokens;
  // A smoothed step time keeps the ETA steady; a resumed job starts afresh.
  if (m->step == prev + 1) j->step_s = j->step_s > 0 ? 0.9 * j->step_s + 0.1 * m->t_total : m->t_total;
  p->eta_s = j->step_s * (double)(p->total_steps - p->step);
  j->phases.forward = m->t_fwd;
  j->phases.loss = m->t_loss;
  j->phases.backward = m->t_bwd;
  j->phases.optimizer_wait = m->t_opt_wait;
  j->phases.total = m->t_total;
  if (job_compute_step(j, m)) log_err("job %s: out of memory for its compute record", j->id);
  int64_t now = now_ms();
  if (now - j->last_step_event_ms >= d->cfg.metrics_interval_ms || m->step == p->total_steps || m->step == 1 ||
      m->evaluated || m->skipped || m->stop) {
    j->last_step_event_ms = now;
    event_step(d, j, m);
    if (m->skipped)
      event_log(d, j, "warning: step %lld skipped its update: non-finite loss or gradients (loss %g, gradient norm %g)",
                (long long)m->step, m->loss, m->grad_norm);
    notify_status(d);
  }
}

// Why a job that succeeded ended: its steps, or the budget or stopping rule
// (compute/govern.h) with the figures it decided on.
static void stop_describe(const job *j, char *out, size_t n) {
  const Traind__V1__Compute *c = j->compute;
  const Traind__V1__BudgetSpec *b = j->spec->budget;
  const char *why = c ? c->stop_reason : "";
  if (!b || !*why) snprintf(out, n, "trained to its budget");
  else if (!strcmp(why, "max_tokens"))
    snprintf(out, n, "stopped by budget.max_tokens: %lld of %lld tokens trained; another step would pass it",
             (long long)c->tokens, (long long)b->max_tokens);
  else if (!strcmp(why, "max_flops"))
    snprintf(out, n, "stopped by budget.max_flops: %.4g of %.4g model FLOPs spent; another step would pass it",
             c->model_flops, b->max_flops);
  else if (!strcmp(why, "max_wall"))
    snprintf(out, n, "stopped by budget.max_wall_seconds: %.1f of %.1f s spent; another step would pass it",
             c->wall_seconds, b->max_wall_seconds);
  else if (!strcmp(why, "marginal_gain"))
    snprintf(out, n, "stopped by budget.gain_tau: held-out loss gains %.3g per FLOP (fit %.4f %+.4f ln F), below %.3g "
             "at %d evaluations in a row", c->gain, c->fit_a, c->fit_b, b->gain_tau,
             b->gain_patience ? b->gain_patience : 3);
  else if (!strcmp(why, "gl"))
    snprintf(out, n, "stopped by budget.gl_alpha: held-out loss %.4f is more than %g%% above its best",
             c->n_evals ? c->evals[c->n_evals - 1]->loss : NAN, b->gl_alpha);
  else snprintf(out, n, "stopped by %s", why);
}

static void on_done(traind *d, job *j, const runner_msg *m) {
  switch (m->outcome) {
  case RUN_SUCCEEDED: {
    char reason[256];
    stop_describe(j, reason, sizeof reason);
    sched_set_state(d, j, JS(SUCCEEDED), reason);
    break;
  }
  case RUN_FAILED: fail(d, j, m->error); break;
  case RUN_CANCELLED: {
    char reason[96];
    snprintf(reason, sizeof reason, "cancelled while running, after step %lld", (long long)m->step);
    sched_set_state(d, j, JS(CANCELLED), reason);
    break;
  }
  case RUN_STOPPED:
    if (j->state == JS(CANCELLING)) { // a cancel came after the stop
      sched_set_state(d, j, JS(CANCELLED), "cancelled while stopping");
      break;
    }
    sched_enqueue(d, j);
    sched_set_state(d, j, JS(QUEUED), stop_reason);
    break;
  }
}

static void on_runner(runner *r, runner_msg *m, void *data) {
  (void)r;
  traind *d = data;
  job *j = job_find(d, m->job); // running jobs are never deleted
  eng_err e = {0};
  if (j) job_touch(j); // every report changes what the job shows
  if (j) switch (m->kind) {
    case RUN_STARTED:
      j->params = m->params;
      if (m->step >= 0) event_log(d, j, "resumed from the checkpoint at step %lld", (long long)m->step);
      else event_log(d, j, "started fresh: %lld parameters", (long long)m->params);
      j->progress.step = m->step > 0 ? m->step : 0;
      break;
    case RUN_STEP:
      on_step(d, j, &m->m);
      if (m->text) {
        free(j->timeline);
        j->timeline = m->text;
        j->timeline_step = m->m.step;
        m->text = NULL;
      }
      break;
    case RUN_PLANNED:
      free(j->plan);
      j->plan = m->text;
      m->text = NULL;
      free(j->timeline_plan);
      j->timeline_plan = m->svg;
      m->svg = NULL;
      if (job_save(d, j, &e)) log_err("job %s: saving its record failed: %s", j->id, e.msg);
      event_log(d, j, "%s", m->error);
      break;
    case RUN_NOTE: event_log(d, j, "%s", m->error); break;
    case RUN_CKPT:
      j->ckpt_step = m->step;
      if (job_save(d, j, &e)) log_err("job %s: saving its record failed: %s", j->id, e.msg);
      event_checkpoint(d, j, m->step);
      break;
    case RUN_DONE: on_done(d, j, m); break;
    }
  int done = m->kind == RUN_DONE;
  free(m->text); // a plan or a timeline for a job no longer there
  free(m->svg);
  free(m);
  if (!done) return;
  if (drain_done) {
    void (*fn)(traind *) = drain_done;
    drain_done = NULL;
    fn(d);
    return;
  }
  retention_run(d);
  sched_kick(d);
}

int sched_start(traind *d) {
  if (runner_create(&d->cpu, d->loop, d->st, d->planning, on_runner, d)) return -1;
  // Jobs the last daemon left running resume from their last checkpoint.
  for (size_t i = 0; i < d->n_all; i++) {
    job *j = d->all[i];
    char reason[256];
    if (j->state == JS(RUNNING)) {
      // The daemon died while the job ran (a kill, the OOM killer, a bug):
      // a job that brings it down every time must not do so forever and
      // starve the queue behind it.
      job_touch(j);
      j->crashes++;
      if (j->crashes >= d->cfg.max_crashes) {
        snprintf(reason, sizeof reason, "the daemon died while running this job (%d times)", j->crashes);
        fail(d, j, reason);
        continue;
      }
      // The store knows of a checkpoint committed just before the crash
      // that the record did not get to hear about.
      eng_err e = {0};
      int64_t step;
      if (store_ckpt_latest(d->st, j->id, &step, &e) == 0) j->ckpt_step = step;
      int at = j->ckpt_step >= 0
                   ? snprintf(reason, sizeof reason,
                              "interrupted by a daemon restart; resumes from the checkpoint at step %lld",
                              (long long)j->ckpt_step)
                   : snprintf(reason, sizeof reason,
                              "interrupted by a daemon restart before its first checkpoint; starts over");
      snprintf(reason + at, sizeof reason - (size_t)at, " (the daemon died while it ran: %d time%s; at %d it fails)",
               j->crashes, j->crashes == 1 ? "" : "s", d->cfg.max_crashes);
      sched_enqueue(d, j);
      sched_set_state(d, j, JS(QUEUED), reason);
    } else if (j->state == JS(CANCELLING)) {
      sched_set_state(d, j, JS(CANCELLED), "cancelled (the daemon restarted while the job was stopping)");
    }
  }
  sched_kick(d);
  return 0;
}

void sched_stop(traind *d) {
  if (d->cpu) runner_destroy(d->cpu, NULL, NULL);
  d->cpu = NULL;
}
