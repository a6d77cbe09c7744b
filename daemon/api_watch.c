// WatchJob: a job's events from a sequence number on, then each new one.
// A watcher reads the log from storage one event at a time and keeps one
// message in flight (its completion is the backpressure); with nothing left
// to send it parks on the job until events.c appends the next event.
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "log.h"

#define T(x) Traind__V1__##x   // types
#define K(x) TRAIND__V1__##x   // constants

struct watch {
  srv_call *c;
  traind *d;
  char job[STORE_JOB_MAX + 1];
  uint64_t next;        // the next sequence number to send
  int no_follow;
  int busy;             // a message is in flight
  int parked;           // on its job's list
  watch *prev, *next_w;
};

static void pump(watch *w);

static void unpark(job *j, watch *w) {
  if (!w->parked) return;
  if (w->prev) w->prev->next_w = w->next_w;
  else j->watchers = w->next_w;
  if (w->next_w) w->next_w->prev = w->prev;
  w->prev = w->next_w = NULL;
  w->parked = 0;
}

static void park(job *j, watch *w) {
  w->prev = NULL;
  w->next_w = j->watchers;
  if (j->watchers) j->watchers->prev = w;
  j->watchers = w;
  w->parked = 1;
}

typedef struct first_event {
  uint64_t seq;
  T(JobEvent) *ev;
} first_event;

static int take_first(void *ctx, uint64_t seq, const void *ev, size_t n) {
  first_event *f = ctx;
  f->seq = seq;
  f->ev = traind__v1__job_event__unpack(NULL, n, ev);
  return 1; // one is enough
}

static void on_sent(srv_call *c, int ok) {
  watch *w = srv_call_app(c);
  w->busy = 0;
  if (ok) pump(w);
}

static void pump(watch *w) {
  if (w->busy) return;
  job *j = job_find(w->d, w->job);
  if (!j) {
    srv_finish(w->c, GRPC_STATUS_NOT_FOUND, "job_id: job %s was removed (retention)", w->job);
    return;
  }
  first_event f = {0, NULL};
  eng_err e = {0};
  int rc = store_event_scan(w->d->st, w->job, w->next, take_first, &f, &e);
  if (rc < 0) {
    srv_finish(w->c, GRPC_STATUS_UNAVAILABLE, "storage: %s", e.msg);
    return;
  }
  if (rc == 1) {
    if (!f.ev) {
      srv_finish(w->c, GRPC_STATUS_DATA_LOSS, "job %s: event %llu in the store is damaged", w->job,
                 (unsigned long long)f.seq);
      return;
    }
    f.ev->seq = f.seq;
    char *stored_id = f.ev->job_id;
    f.ev->job_id = w->job;
    w->busy = 1;
    w->next = f.seq + 1;
    srv_send(w->c, &f.ev->base, on_sent);
    f.ev->job_id = stored_id;
    protobuf_c_message_free_unpacked(&f.ev->base, NULL);
    return;
  }
  // Nothing newer in the store. Events still on their way there (the group
  // commit) wake the watcher when they land; once all are read, the terminal
  // state's event, always the job's last, ends the stream.
  if (w->next > j->last_seq && (w->no_follow || job_finished(j))) srv_finish(w->c, GRPC_STATUS_OK, "%s", "");
  else park(j, w);
}

static void on_close(srv_call *c, void *app) {
  (void)c;
  watch *w = app;
  job *j = job_find(w->d, w->job);
  if (j) unpark(j, w);
  free(w);
}

void api_watch(srv_call *c, ProtobufCMessage *req) {
  T(WatchJobRequest) *r = (T(WatchJobRequest) *)req;
  traind *d = srv_call_data(c);
  val_err e;
  if (val_watch(r, &e)) {
    api_refuse(c, &e);
    return;
  }
  if (!api_job(c, d, r->job_id)) return;
  watch *w = calloc(1, sizeof *w);
  if (!w) {
    srv_fail(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "request: out of memory for a watcher");
    return;
  }
  w->c = c;
  w->d = d;
  snprintf(w->job, sizeof w->job, "%s", r->job_id);
  w->next = r->after_seq + 1;
  w->no_follow = r->no_follow;
  srv_on_close(c, on_close, w);
  pump(w);
}

void events_wake(traind *d, job *j) {
  (void)d;
  watch *w = j->watchers;
  j->watchers = NULL; // pump re-parks those that stay idle
  while (w) {
    watch *next = w->next_w;
    w->parked = 0;
    w->prev = w->next_w = NULL;
    pump(w);
    w = next;
  }
}

void events_job_gone(traind *d, job *j) {
  (void)d;
  watch *w = j->watchers;
  j->watchers = NULL;
  while (w) {
    watch *next = w->next_w;
    w->parked = 0;
    w->prev = w->next_w = NULL;
    srv_finish(w->c, GRPC_STATUS_NOT_FOUND, "job_id: job %s was removed (retention)", w->job);
    w = next;
  }
}
