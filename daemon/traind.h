// The daemon's state, owned by the loop thread (DESIGN §5): the job table
// and its indexes, the queue, the runner, the server. Other threads reach it
// only through mboxes. Modules:
//   jobs.c     the table, job records in storage, job -> proto
//   events.c   a job's event log and the watchers waiting on it
//   sched.c    the queue, starting/stopping jobs on the runner, its reports
//   runner.c   the runner thread that drives the engine
//   api_*.c    the gRPC methods
//   retention.c, notify.c, main.c
#ifndef TRAIND_TRAIND_H
#define TRAIND_TRAIND_H

#include <stdint.h>
#include <uv.h>

#include "config.h"
#include "owner.h"
#include "engine.h"
#include "server.h"
#include "storage/store.h"
#include "strmap.h"
#include "traind/v1/traind.pb-c.h"

#define TRAIND_VERSION "0.1.0"

typedef Traind__V1__JobState job_state;
#define JS(x) TRAIND__V1__JOB_STATE__JOB_STATE_##x

typedef struct watch watch;
typedef struct runner runner;

typedef struct job {
  char id[STORE_JOB_MAX + 1];
  char *request_id;             // NULL when the submission had none (unique per owner)
  char owner[OWNER_MAX];        // daemon/owner.h
  gid_t owner_gid;              // the submitting connection's gid (owner_access_of_job)
  char *request_key;            // "owner/request_id", by_request's key; NULL with request_id
  Traind__V1__JobSpec *spec;    // as submitted (protobuf-c allocated, owned)
  int32_t priority;
  int preempt;
  job_state state;
  int64_t created_ms, started_ms, finished_ms;
  int64_t order;                // queue position key: priority, then submission time
  Traind__V1__Progress progress; // scalars only; phases in `phases`
  Traind__V1__Phases phases;
  int64_t ckpt_step;            // -1: none
  char *error;                  // NULL unless FAILED
  uint64_t last_seq;
  int32_t attempts;
  int32_t crashes;              // daemon deaths while it ran (sched_start counts them)
  char device[16];
  eng_config model;
  int64_t params;
  char *plan;                   // the plan it runs with (JSON), once made; NULL: none
  Traind__V1__Compute *compute; // what it spent (jobs.c job_compute_step); protobuf-c's
                                // layout, malloc'ed, freed as an unpacked message
  // ---- runtime only ----
  int saved;                    // its record was queued for the store once (or loaded from it)
  uint8_t *view;                // job_view's bytes, NULL until asked for and after job_touch
  size_t view_n;
  char *timeline;               // the last measured step as SVG (GetTimeline), and its step
  int64_t timeline_step;
  char *timeline_plan;          // the plan's predicted step as SVG, when planned in this run
  watch *watchers;              // parked watchers, woken by a new event
  int64_t last_step_event_ms;   // when the last StepMetrics event was recorded
  double step_s;                // smoothed seconds per step, for the ETA
  struct job *qprev, *qnext;    // the queue (only while QUEUED)
  int queued;
  int held;                     // queued but not startable under this config (sched.c), until
  int held_gen;                 //   traind.config_gen moves past this
} job;

typedef struct traind {
  uv_loop_t *loop;
  char *config_path;            // NULL: none
  int config_gen;               // config reloads so far
  cfg cfg, over;                // effective config; command-line overrides
  char *token;                  // bearer token for TCP (from token_file)
  store *st;
  struct commit *commit;        // group commit of st's job and event writes (daemon/commit.h)
  srv *srv;
  runner *cpu;                  // the one runner until the engine has a GPU backend
  struct planning *planning;    // the planner's profile cache (daemon/planning.h)
  struct metrics *metrics;      // the Prometheus endpoint (daemon/metrics.h), NULL when off
  strmap by_id, by_request;
  job **all;                    // every job, ascending id (= submission order)
  size_t n_all, cap_all;
  job *qhead, *qtail;           // queued jobs, in order
  int n_queued;
  int64_t last_id_us;           // ids are strictly increasing
  int64_t started_ms;
  int draining;                 // SIGTERM seen: no new jobs, stop the running one
  uv_signal_t sig_term, sig_int, sig_hup;
  uv_timer_t t_retention, t_watchdog, t_drain;
  uv_timer_t t_notify;          // notify.c: STATUS at most every 100 ms
  int notify_dirty;             // a change since the last STATUS
} traind;

int64_t now_ms(void);

// ---- jobs.c ----
job *job_find(traind *d, const char *id);
// The job an owner submitted with a request id, or NULL.
job *job_find_request(traind *d, const char *owner, const char *request_id);
// A new QUEUED job from a validated request (takes its spec). Not yet saved.
job *job_new(traind *d, Traind__V1__SubmitJobRequest *req, const char *owner, const eng_config *model);
// Adds to the table and indexes; -1 when out of memory.
int job_insert(traind *d, job *j);
// Writes the record (synced). Returns 0 or a negative code with e filled.
int job_save(traind *d, job *j, eng_err *e);
// The same, and gives the record framed as a field's value (its length,
// then the encoded Job with its spec; malloc'd, the caller's): the answer
// to a submission sends these bytes instead of encoding the job again.
int job_save_keep(traind *d, job *j, uint8_t **framed, size_t *framed_n, eng_err *e);
// Removes from memory and from storage (record, events, checkpoints).
int job_delete(traind *d, job *j, eng_err *e);
// Loads every job from storage at startup.
int jobs_load(traind *d, eng_err *e);
void jobs_free(traind *d);
int job_finished(const job *j);
// The public view, borrowing the job's strings and spec and the caller's two
// buffers (pack it, never free it). with_spec = 0 leaves spec NULL.
void job_pb(const job *j, int with_spec, Traind__V1__Job *out, Traind__V1__ModelConfig *model_buf,
            Traind__V1__Progress *progress_buf);
// The job as ListJobs shows it (job_pb without the spec), encoded with its
// length prefix as a repeated field's element; kept until job_touch, since
// lists encode the same unchanged jobs again and again. NULL when out of
// memory.
const uint8_t *job_view(job *j, size_t *n);
// Every change to a field job_pb reads comes with this (jobs.c, events.c,
// sched.c); builds with TRAIND_VERIFY_CACHES check each view against a
// fresh encoding.
void job_touch(job *j);
// The canonical bytes of the submission (request_id left out), to compare
// an idempotent retry with. malloc'd.
uint8_t *job_submission_bytes(const Traind__V1__SubmitJobRequest *r, size_t *n);
uint8_t *job_own_submission_bytes(const job *j, size_t *n);

// ---- events.c ----
// Appends an event (synced) and wakes the job's watchers.
int event_state(traind *d, job *j, const char *reason);
int event_step(traind *d, job *j, const eng_metrics *m);
// The step's spending into j->compute: the tally, the fit, the stop reason
// and, when it evaluated, its point on the curve (points of steps a resume
// redoes are replaced). -1 when out of memory.
int job_compute_step(job *j, const eng_metrics *m);
int event_checkpoint(traind *d, job *j, int64_t step);
int event_log(traind *d, job *j, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
// The job's parked watchers (api_watch.c): wake them after an event, end
// them when the job is deleted.
void events_wake(traind *d, job *j);
void events_job_gone(traind *d, job *j);

// ---- sched.c ----
void sched_enqueue(traind *d, job *j);
void sched_dequeue(traind *d, job *j);
// Starts the next queued job when the runner is idle (not while draining).
void sched_kick(traind *d);
// Sets the state, records the event and saves the record.
int sched_set_state(traind *d, job *j, job_state st, const char *reason);
// Cancels a queued or running job (returns a status message on refusal).
int sched_cancel(traind *d, job *j, const char **refusal);
// A new job asked to preempt: checkpoint and requeue a lower-priority one.
void sched_preempt_for(traind *d, job *j);
// SIGTERM: stop the running job with a checkpoint; done() when idle.
void sched_drain(traind *d, void (*done)(traind *d));
// The drain ran out of time: records the running job as queued again
// before the process exits under it.
void sched_abandon(traind *d);
int sched_start(traind *d);
void sched_stop(traind *d);
const char *sched_running_id(traind *d);

// ---- retention.c ----
void retention_run(traind *d);

// ---- notify.c ----
// systemd STATUS after a change (a burst of them: one per 100 ms).
void notify_status(traind *d);

#endif
