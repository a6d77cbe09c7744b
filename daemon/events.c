// A job's event log: every state change, recorded step metrics, committed
// checkpoint and log line, numbered here and written through the group
// commit (commit.h); watchers parked on the job are woken once it is stored
// (api_watch.c reads it back).
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "commit.h"
#include "log.h"
#include "traind.h"

#define T(x) Traind__V1__##x   // types
#define K(x) TRAIND__V1__##x   // constants

typedef struct wake {
  traind *d;
  char job[STORE_JOB_MAX + 1];
} wake;

static void on_durable(void *arg) {
  wake *w = arg;
  job *j = job_find(w->d, w->job);
  if (j) events_wake(w->d, j);
  free(w);
}

static int append(traind *d, job *j, T(JobEvent) *ev) {
  ev->time_ms = now_ms();
  size_t n = protobuf_c_message_get_packed_size(&ev->base);
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf) {
    log_err("job %s: out of memory for an event", j->id);
    return ENG_ENOMEM;
  }
  protobuf_c_message_pack(&ev->base, buf);
  // The loop is the log's one writer: it numbers the events; watchers read
  // them back from the store once they are there.
  job_touch(j);
  j->last_seq++;
  commit_event_put(d->commit, j->id, j->last_seq, buf, n);
  wake *w = malloc(sizeof *w);
  if (w) {
    w->d = d;
    snprintf(w->job, sizeof w->job, "%s", j->id);
  }
  if (!w || commit_when_durable(d->commit, on_durable, w)) {
    free(w);
    log_err("job %s: out of memory waking its watchers", j->id);
    return ENG_ENOMEM;
  }
  return 0;
}

int event_state(traind *d, job *j, const char *reason) {
  T(StateChange) sc = K(STATE_CHANGE__INIT);
  sc.state = j->state;
  sc.reason = (char *)reason;
  T(JobEvent) ev = K(JOB_EVENT__INIT);
  ev.kind_case = K(JOB_EVENT__KIND_STATE);
  ev.state = &sc;
  return append(d, j, &ev);
}

int event_step(traind *d, job *j, const eng_metrics *m) {
  T(Phases) ph = K(PHASES__INIT);
  ph.forward = m->t_fwd;
  ph.loss = m->t_loss;
  ph.backward = m->t_bwd;
  ph.optimizer_wait = m->t_opt_wait;
  ph.total = m->t_total;
  T(StepMetrics) sm = K(STEP_METRICS__INIT);
  sm.step = m->step;
  sm.total_steps = j->progress.total_steps;
  sm.loss = m->loss;
  sm.eval_loss = m->evaluated ? m->eval_loss : NAN;
  sm.lr = m->lr;
  sm.grad_norm = m->grad_norm;
  sm.skipped = m->skipped;
  sm.tokens = m->tokens;
  sm.tokens_per_s = m->tokens_per_s;
  sm.phases = &ph;
  sm.peak_device_bytes = (int64_t)m->peak_arena;
  sm.counted_tokens = m->counted;
  sm.model_flops = m->flops_model;
  sm.executed_flops = m->flops_exec;
  sm.mfu = m->mfu;
  sm.total_tokens = m->total.tokens;
  sm.total_model_flops = m->total.flops_model;
  sm.wall_seconds = m->total.wall_s;
  sm.stop_reason = (char *)eng_stop_name(m->stop);
  T(JobEvent) ev = K(JOB_EVENT__INIT);
  ev.kind_case = K(JOB_EVENT__KIND_STEP);
  ev.step = &sm;
  return append(d, j, &ev);
}

int event_checkpoint(traind *d, job *j, int64_t step) {
  T(CheckpointSaved) cs = K(CHECKPOINT_SAVED__INIT);
  cs.step = step;
  T(JobEvent) ev = K(JOB_EVENT__INIT);
  ev.kind_case = K(JOB_EVENT__KIND_CHECKPOINT);
  ev.checkpoint = &cs;
  return append(d, j, &ev);
}

int event_log(traind *d, job *j, const char *fmt, ...) {
  char text[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  log_info("job %s: %s", j->id, text);
  T(LogLine) ll = K(LOG_LINE__INIT);
  ll.text = text;
  T(JobEvent) ev = K(JOB_EVENT__INIT);
  ev.kind_case = K(JOB_EVENT__KIND_LOG);
  ev.log = &ll;
  return append(d, j, &ev);
}
