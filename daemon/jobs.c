// The job table: creation, ids, the indexes, records in storage.
#define _GNU_SOURCE // asprintf
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "commit.h"
#include "log.h"
#include "spec.h"
#include "traind.h"

#define T(x) Traind__V1__##x   // types
#define K(x) TRAIND__V1__##x   // constants

// Ids and queue order count from here, so both stay short.
static const int64_t EPOCH_2024_MS = INT64_C(1704067200000);

int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

job *job_find(traind *d, const char *id) { return strmap_get(&d->by_id, id); }

// by_request's keys: request ids are the owner's own namespace.
job *job_find_request(traind *d, const char *owner, const char *request_id) {
  char key[OWNER_MAX + 256];
  snprintf(key, sizeof key, "%s/%s", owner, request_id);
  return strmap_get(&d->by_request, key);
}

// The job's owner and request id, its by_request key with them; -1 when out
// of memory.
static int job_owner_set(job *j, const char *owner, const char *request_id) {
  snprintf(j->owner, sizeof j->owner, "%s", owner);
  if (!*request_id) return 0;
  j->request_id = strdup(request_id);
  if (!j->request_id || asprintf(&j->request_key, "%s/%s", owner, request_id) < 0) {
    free(j->request_id);
    j->request_id = j->request_key = NULL;
    return -1;
  }
  return 0;
}

int job_finished(const job *j) {
  return j->state == JS(SUCCEEDED) || j->state == JS(FAILED) || j->state == JS(CANCELLED);
}

// "j" and 10 base-36 digits of microseconds since 2024: unique (strictly
// increasing, also across restarts while the clock does not jump back by
// more than the downtime), and sorting ids sorts by submission.
static void job_id_make(traind *d, char *out) {
  int64_t us = now_us() - EPOCH_2024_MS * 1000;
  if (us <= d->last_id_us) us = d->last_id_us + 1;
  d->last_id_us = us;
  static const char digits[] = "0123456789abcdefghijklmnopqrstuvwxyz";
  out[0] = 'j';
  for (int i = 10; i >= 1; i--, us /= 36) out[i] = digits[us % 36];
  out[11] = 0;
}

static int64_t job_id_us(const char *id) {
  if (id[0] != 'j' || strlen(id) != 11) return -1;
  int64_t us = 0;
  for (int i = 1; i <= 10; i++) {
    const char *p = strchr("0123456789abcdefghijklmnopqrstuvwxyz", id[i]);
    if (!p || !id[i]) return -1;
    us = us * 36 + (p - "0123456789abcdefghijklmnopqrstuvwxyz");
  }
  return us;
}

job *job_new(traind *d, T(SubmitJobRequest) *req, const char *owner, const eng_config *model) {
  job *j = calloc(1, sizeof *j);
  if (!j) return NULL;
  job_id_make(d, j->id);
  if (job_owner_set(j, owner, req->request_id)) {
    free(j);
    return NULL;
  }
  j->spec = req->spec;
  req->spec = NULL; // the job owns it now; the call frees the rest
  j->priority = req->priority;
  j->preempt = req->preempt;
  j->state = JS(QUEUED);
  j->created_ms = now_ms();
  // Higher priority first, then first come first served.
  j->order = ((int64_t)(1000 - j->priority) << 43) | (j->created_ms - EPOCH_2024_MS);
  traind__v1__progress__init(&j->progress);
  traind__v1__phases__init(&j->phases);
  j->progress.eval_loss = NAN;
  j->ckpt_step = -1;
  j->model = *model;
  snprintf(j->device, sizeof j->device, "cpu");
  return j;
}

static void job_free(job *j) {
  job_touch(j);
  if (j->spec) protobuf_c_message_free_unpacked(&j->spec->base, NULL);
  free(j->request_id);
  free(j->request_key);
  free(j->error);
  free(j->plan);
  free(j->timeline);
  free(j->timeline_plan);
  if (j->compute) protobuf_c_message_free_unpacked(&j->compute->base, NULL);
  free(j);
}

int job_compute_step(job *j, const eng_metrics *m) {
  T(Compute) *c = j->compute;
  if (!c) {
    if (!(c = j->compute = malloc(sizeof *c))) return -1;
    traind__v1__compute__init(c);
  }
  c->tokens = m->total.tokens;
  c->counted_tokens = m->total.counted;
  c->model_flops = m->total.flops_model;
  c->executed_flops = m->total.flops_exec;
  c->wall_seconds = m->total.wall_s;
  c->mfu = m->mfu;
  c->peak_flops = m->peak_flops;
  c->gain = m->gain;
  c->fit_a = m->fit_a;
  c->fit_b = m->fit_b;
  const char *why = eng_stop_name(m->stop);
  if (strcmp(c->stop_reason, why)) {
    char *s = strdup(why);
    if (!s) return -1;
    if (c->stop_reason != protobuf_c_empty_string) free(c->stop_reason);
    c->stop_reason = s;
  }
  if (!m->evaluated) return 0;
  while (c->n_evals && c->evals[c->n_evals - 1]->step >= m->step) free(c->evals[--c->n_evals]);
  T(EvalPoint) **ev = realloc(c->evals, (c->n_evals + 1) * sizeof *ev);
  if (!ev) return -1;
  c->evals = ev;
  T(EvalPoint) *p = malloc(sizeof *p);
  if (!p) return -1;
  traind__v1__eval_point__init(p);
  p->step = m->step;
  p->tokens = m->total.tokens;
  p->model_flops = m->total.flops_model;
  p->loss = m->eval_loss;
  ev[c->n_evals++] = p;
  return 0;
}

int job_insert(traind *d, job *j) {
  if (d->n_all == d->cap_all) {
    size_t cap = d->cap_all ? d->cap_all * 2 : 256;
    job **all = realloc(d->all, cap * sizeof *all);
    if (!all) return -1;
    d->all = all;
    d->cap_all = cap;
  }
  if (strmap_put(&d->by_id, j->id, j)) return -1;
  if (j->request_key && strmap_put(&d->by_request, j->request_key, j)) {
    strmap_del(&d->by_id, j->id);
    return -1;
  }
  // New ids are the largest; loading inserts in id order too.
  d->all[d->n_all++] = j;
  return 0;
}

void job_pb(const job *j, int with_spec, T(Job) *out, T(ModelConfig) *model_buf, T(Progress) *progress_buf) {
  traind__v1__job__init(out);
  out->id = (char *)j->id;
  out->request_id = j->request_id ? j->request_id : "";
  out->spec = with_spec ? j->spec : NULL;
  out->priority = j->priority;
  out->preempt = j->preempt;
  out->state = j->state;
  out->created_ms = j->created_ms;
  out->started_ms = j->started_ms;
  out->finished_ms = j->finished_ms;
  *progress_buf = j->progress;
  progress_buf->phases = (T(Phases) *)&j->phases;
  out->progress = progress_buf;
  out->checkpoint_step = j->ckpt_step;
  out->error = j->error ? j->error : "";
  out->last_seq = j->last_seq;
  out->attempts = j->attempts;
  out->crashes = j->crashes;
  out->device = (char *)j->device;
  spec_config_to_pb(&j->model, model_buf);
  out->model = model_buf;
  out->parameters = j->params;
  out->plan = j->plan ? j->plan : "";
  out->owner = (char *)j->owner;
  out->owner_gid = j->owner_gid;
  out->compute = j->compute;
}

static uint8_t *pack(const ProtobufCMessage *m, size_t *n) {
  *n = protobuf_c_message_get_packed_size(m);
  uint8_t *buf = malloc(*n ? *n : 1);
  if (buf) protobuf_c_message_pack(m, buf);
  return buf;
}

// A message encoded as a field's value: a base-128 length, then the
// message (*head bytes of length).
static uint8_t *pack_framed(const ProtobufCMessage *m, size_t *n, size_t *head) {
  size_t body = protobuf_c_message_get_packed_size(m), h = 0;
  uint8_t len[10];
  for (size_t v = body; h == 0 || v; v >>= 7) len[h++] = (uint8_t)((v & 0x7f) | (v >> 7 ? 0x80 : 0));
  uint8_t *buf = malloc(h + body);
  if (!buf) return NULL;
  memcpy(buf, len, h);
  protobuf_c_message_pack(m, buf + h);
  *n = h + body;
  *head = h;
  return buf;
}

static uint8_t *view_pack(const job *j, size_t *n) {
  T(Job) pb;
  T(ModelConfig) model;
  T(Progress) progress;
  job_pb(j, 0, &pb, &model, &progress);
  size_t head;
  return pack_framed(&pb.base, n, &head);
}

const uint8_t *job_view(job *j, size_t *n) {
#ifdef TRAIND_VERIFY_CACHES
  if (j->view) {
    size_t fn = 0;
    uint8_t *fresh = view_pack(j, &fn);
    if (fresh && (fn != j->view_n || memcmp(fresh, j->view, fn))) {
      log_err("job %s: its cached view is stale: a change to it came without job_touch", j->id);
      abort();
    }
    free(fresh);
  }
#endif
  if (!j->view) j->view = view_pack(j, &j->view_n);
  *n = j->view_n;
  return j->view;
}

void job_touch(job *j) {
  free(j->view);
  j->view = NULL;
}

uint8_t *job_submission_bytes(const T(SubmitJobRequest) *r, size_t *n) {
  T(SubmitJobRequest) c = *r;
  c.request_id = "";
  return pack(&c.base, n);
}

uint8_t *job_own_submission_bytes(const job *j, size_t *n) {
  T(SubmitJobRequest) r = K(SUBMIT_JOB_REQUEST__INIT);
  r.spec = j->spec;
  r.priority = j->priority;
  r.preempt = j->preempt;
  return job_submission_bytes(&r, n);
}

int job_save_keep(traind *d, job *j, uint8_t **framed, size_t *framed_n, eng_err *e) {
  T(Job) rec;
  T(ModelConfig) model;
  T(Progress) progress;
  job_pb(j, 1, &rec, &model, &progress);
  size_t fn, head;
  uint8_t *f = pack_framed(&rec.base, &fn, &head), *buf = f ? malloc(fn - head) : NULL;
  if (!buf) {
    free(f);
    return eng_err_set(e, ENG_ENOMEM, "job %s: cannot allocate its record", j->id);
  }
  memcpy(buf, f + head, fn - head);
  commit_job_put(d->commit, j->id, buf, fn - head, (uint32_t)j->state, j->state == JS(QUEUED) ? j->order : -1,
                 !j->saved);
  j->saved = 1;
  if (framed) *framed = f, *framed_n = fn;
  else free(f);
  return 0;
}

int job_save(traind *d, job *j, eng_err *e) { return job_save_keep(d, j, NULL, NULL, e); }

int job_delete(traind *d, job *j, eng_err *e) {
  (void)e;
  commit_job_delete(d->commit, j->id);
  events_job_gone(d, j);
  if (j->queued) sched_dequeue(d, j);
  strmap_del(&d->by_id, j->id);
  if (j->request_key && strmap_get(&d->by_request, j->request_key) == j) strmap_del(&d->by_request, j->request_key);
  for (size_t i = 0; i < d->n_all; i++) {
    if (d->all[i] != j) continue;
    memmove(&d->all[i], &d->all[i + 1], (d->n_all - i - 1) * sizeof *d->all);
    d->n_all--;
    break;
  }
  job_free(j);
  return 0;
}

// ---- startup -------------------------------------------------------------------

static job *job_from_record(const char *id, const void *buf, size_t n) {
  T(Job) *r = traind__v1__job__unpack(NULL, n, buf);
  if (!r) return NULL;
  job *j = calloc(1, sizeof *j);
  if (!j || strlen(id) > STORE_JOB_MAX || !r->spec || !r->model) {
    free(j);
    protobuf_c_message_free_unpacked(&r->base, NULL);
    return NULL;
  }
  snprintf(j->id, sizeof j->id, "%s", id);
  j->saved = 1;
  j->spec = r->spec;
  r->spec = NULL;
  j->priority = r->priority;
  j->preempt = r->preempt;
  j->state = r->state;
  j->created_ms = r->created_ms;
  j->started_ms = r->started_ms;
  j->finished_ms = r->finished_ms;
  traind__v1__progress__init(&j->progress);
  traind__v1__phases__init(&j->phases);
  if (r->progress) {
    j->progress = *r->progress;
    if (r->progress->phases) j->phases = *r->progress->phases;
  }
  j->progress.phases = NULL;
  j->progress.base.unknown_fields = NULL;
  j->progress.base.n_unknown_fields = 0;
  j->phases.base.unknown_fields = NULL;
  j->phases.base.n_unknown_fields = 0;
  j->ckpt_step = r->checkpoint_step;
  j->error = *r->error ? strdup(r->error) : NULL;
  j->last_seq = r->last_seq;
  j->attempts = r->attempts;
  j->crashes = r->crashes;
  snprintf(j->device, sizeof j->device, "%s", r->device);
  spec_config_from_pb(r->model, &j->model);
  j->params = r->parameters;
  j->plan = *r->plan ? strdup(r->plan) : NULL;
  j->owner_gid = r->owner_gid;
  j->compute = r->compute;
  r->compute = NULL;
  if (job_owner_set(j, r->owner, r->request_id)) {
    job_free(j);
    protobuf_c_message_free_unpacked(&r->base, NULL);
    return NULL;
  }
  j->order = ((int64_t)(1000 - j->priority) << 43) | (j->created_ms - EPOCH_2024_MS);
  protobuf_c_message_free_unpacked(&r->base, NULL);
  return j;
}

typedef struct load_ctx {
  traind *d;
  eng_err *e;
  int rc;
} load_ctx;

static int load_one(void *ctx, const char *id, uint32_t state, int64_t order) {
  (void)state, (void)order;
  load_ctx *l = ctx;
  void *buf;
  size_t n;
  int rc = store_job_get(l->d->st, id, &buf, &n, NULL, NULL, l->e);
  if (rc < 0) return rc;
  if (rc == 1) return 0; // deleted between the scan and the read: cannot happen here, harmless
  job *j = job_from_record(id, buf, n);
  free(buf);
  if (!j) {
    log_err("job %s: its record in the store is damaged; leaving it out", id);
    return 0;
  }
  // The record is written before the event of the same change (and a daemon
  // may die between them): the log's own last number is the one to go on from.
  uint64_t last;
  if ((rc = store_event_last(l->d->st, id, &last, l->e))) {
    job_free(j);
    return rc;
  }
  if (last > j->last_seq) j->last_seq = last;
  if (j->state == JS(QUEUED)) sched_enqueue(l->d, j);
  if (l->d->n_all == l->d->cap_all) {
    size_t cap = l->d->cap_all ? l->d->cap_all * 2 : 256;
    job **all = realloc(l->d->all, cap * sizeof *all);
    if (!all) return eng_err_set(l->e, ENG_ENOMEM, "out of memory loading the jobs");
    l->d->all = all;
    l->d->cap_all = cap;
  }
  l->d->all[l->d->n_all++] = j;
  return 0;
}

static int by_id(const void *a, const void *b) { return strcmp((*(job *const *)a)->id, (*(job *const *)b)->id); }

int jobs_load(traind *d, eng_err *e) {
  load_ctx l = {d, e, 0};
  static const job_state states[] = {JS(QUEUED), JS(RUNNING), JS(SUCCEEDED), JS(FAILED), JS(CANCELLED), JS(CANCELLING)};
  for (size_t i = 0; i < sizeof states / sizeof states[0]; i++) {
    int rc = store_job_scan_state(d->st, (uint32_t)states[i], load_one, &l, e);
    if (rc < 0) return rc;
  }
  if (d->n_all) qsort(d->all, d->n_all, sizeof *d->all, by_id);
  for (size_t i = 0; i < d->n_all; i++) {
    job *j = d->all[i];
    if (strmap_put(&d->by_id, j->id, j) || (j->request_key && strmap_put(&d->by_request, j->request_key, j)))
      return eng_err_set(e, ENG_ENOMEM, "out of memory indexing the jobs");
    int64_t us = job_id_us(j->id);
    if (us > d->last_id_us) d->last_id_us = us;
  }
  return 0;
}

void jobs_free(traind *d) {
  for (size_t i = 0; i < d->n_all; i++) job_free(d->all[i]);
  free(d->all);
  d->all = NULL;
  d->n_all = d->cap_all = 0;
  strmap_free(&d->by_id);
  strmap_free(&d->by_request);
}
