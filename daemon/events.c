// A job's event log: every state change, recorded step metrics, committed
// checkpoint and log line, appended (synced) with the next sequence number;
// watchers parked on the job are woken (api_watch.c).
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "commit.h"
#include "log.h"
#include "traind.h"

#define T(x) Traind__V1__##x   // types
#define K(x) TRAIND__V1__##x   // constants

static int append(traind *d, job *j, T(JobEvent) *ev) {
  ev->time_ms = now_ms();
  size_t n = protobuf_c_message_get_packed_size(&ev->base);
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf) {
    log_err("job %s: out of memory for an event", j->id);
    return ENG_ENOMEM;
  }
  protobuf_c_message_pack(&ev->base, buf);
  eng_err e = {0};
  uint64_t seq;
  int rc = store_event_append(d->st, j->id, buf, n, &seq, &e);
  free(buf);
  if (rc) {
    log_err("job %s: recording an event failed: %s", j->id, e.msg);
    return rc;
  }
  commit_wrote(d->commit);
  j->last_seq = seq;
  events_wake(d, j);
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
  sm.eval_loss = m->eval_loss;
  sm.lr = m->lr;
  sm.grad_norm = m->grad_norm;
  sm.skipped = m->skipped;
  sm.tokens = m->tokens;
  sm.tokens_per_s = m->tokens_per_s;
  sm.phases = &ph;
  sm.peak_device_bytes = (int64_t)m->peak_arena;
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
