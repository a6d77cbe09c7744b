// A runner: one thread per device that drives the engine for one job at a
// time (DESIGN §5). The loop hands it a job; it reports back through an
// mbox (started, step metrics, checkpoint committed, done). The loop asks it
// to cancel (the job ends CANCELLED) or to stop (checkpoint, then the job is
// requeued); both take effect within one layer's compute through the
// engine's cancel flag.
#ifndef TRAIND_RUNNER_H
#define TRAIND_RUNNER_H

#include <uv.h>

#include "mbox.h"
#include "planning.h"
#include "spec.h"
#include "storage/store.h"

typedef enum { RUN_STARTED, RUN_PLANNED, RUN_NOTE, RUN_STEP, RUN_CKPT, RUN_DONE } runner_msg_kind;
typedef enum { RUN_SUCCEEDED, RUN_FAILED, RUN_CANCELLED, RUN_STOPPED } runner_outcome;

typedef struct runner_msg {
  mbox_item item;
  runner_msg_kind kind;
  char job[STORE_JOB_MAX + 1];
  eng_metrics m;           // RUN_STEP
  int64_t step;            // RUN_STARTED: resumed from (-1: fresh); RUN_CKPT, RUN_DONE: steps done
  int64_t params;          // RUN_STARTED
  runner_outcome outcome;  // RUN_DONE
  char error[600];         // RUN_DONE with RUN_FAILED; RUN_PLANNED: a line saying what the plan predicts;
                           // RUN_NOTE: the engine's note (eng_spec.note), for the job's log
  char *text;              // RUN_PLANNED: the plan (JSON); RUN_STEP: the step's timeline (SVG);
                           // for the handler to keep or free
  char *svg;               // RUN_PLANNED: the plan's predicted step (SVG), likewise
} runner_msg;

typedef struct runner runner;
// Loop thread; the handler frees msg with free().
typedef void (*runner_fn)(runner *r, runner_msg *msg, void *data);

int runner_create(runner **out, uv_loop_t *loop, store *st, planning *planning, runner_fn fn, void *data);
// Starts a job on an idle runner and takes the plan (freed when the job is
// done); the job's threads run at niceness nice, under SCHED_IDLE when idle
// (config runner_nice, runner_idle). -1 (out of memory): not started, the
// plan is still the caller's.
int runner_start(runner *r, const char *job, spec_plan *plan, int nice, int idle);
// Returns the steps the engine had done when the flag went up (-1: the
// job's run was not loaded yet): the job ends with at most one more, the
// step then in flight.
int64_t runner_cancel(runner *r);
void runner_stop(runner *r);
// The job it runs, or NULL when idle (loop thread: idle once RUN_DONE came).
const char *runner_job(const runner *r);
// Joins the thread; only when idle. done runs once the mbox is closed.
void runner_destroy(runner *r, void (*done)(void *), void *arg);

#endif
