#define _GNU_SOURCE // pthread_setname_np, gettid
#include "runner.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "log.h"
#include "planning.h"

struct runner {
  uv_loop_t *loop;
  store *st;
  planning *planning;
  runner_fn fn;
  void *data;
  mbox mb;
  uv_thread_t thread;
  uv_mutex_t lock;
  uv_cond_t cond;
  int quit;                        // under lock
  int has_work;                    // under lock
  char job[STORE_JOB_MAX + 1];     // loop thread's view: non-empty while busy
  char work_job[STORE_JOB_MAX + 1];
  spec_plan plan;
  int nice;                        // the job's threads' niceness
  int idle;                        // and whether they run SCHED_IDLE
  runner_msg *done_msg;            // the RUN_DONE report, allocated by runner_start
  volatile int cancel;             // the engine polls it once per layer
  volatile int stop;               // with cancel: checkpoint and stop instead
  _Atomic int64_t steps;           // the engine's steps done; -1 until the job's run is loaded
  void (*done)(void *);
  void *done_arg;
};

static runner_msg *msg_new(runner *r, runner_msg_kind kind) {
  runner_msg *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  m->kind = kind;
  memcpy(m->job, r->work_job, sizeof m->job);
  return m;
}

static void post(runner *r, runner_msg *m) {
  if (m) mbox_post(&r->mb, &m->item);
}

// Fills the RUN_DONE report allocated when the job started (so it cannot be
// lost to a failed malloc); thread_main posts it once the runner is idle.
static void set_done(runner *r, runner_outcome o, int64_t step, const char *error) {
  runner_msg *m = r->done_msg;
  m->outcome = o;
  m->step = step;
  if (error) snprintf(m->error, sizeof m->error, "%s", error);
}

static int save(runner *r, eng_run *run, const eng_store *st, eng_err *e) {
  int rc = eng_save(run, st, e);
  if (rc) return rc;
  runner_msg *m = msg_new(r, RUN_CKPT);
  if (m) m->step = eng_steps_done(run);
  post(r, m);
  return 0;
}

// The job's plan: the one it was first planned with, or a new one, which
// goes to the loop to be kept with the job. p keeps it for the engine
// (p->eng.plan), which takes the policy, the split and the transfers from it.
static int plan_apply(runner *r, spec_plan *p, eng_err *e) {
  eng_plan *pl = malloc(sizeof *pl);
  if (!pl) return eng_err_set(e, ENG_ENOMEM, "planning: cannot allocate the plan");
  char *svg = NULL; // the plan's predicted step, for GetTimeline
  int rc = p->plan_json ? eng_plan_from_json(p->plan_json, pl, e) : planning_make(r->planning, &p->eng, pl, NULL, &svg, e);
  if (rc) {
    free(pl);
    return eng_err_prefix(e, "planning: ");
  }
  p->plan = pl;
  p->eng.plan = pl;
  p->eng.micro_batches = pl->n_micro;
  if (!p->plan_json) {
    runner_msg *m = msg_new(r, RUN_PLANNED);
    if (m && eng_plan_to_json(pl, &m->text, e) == 0) {
      m->svg = svg;
      svg = NULL;
      snprintf(m->error, sizeof m->error,
               "planned (%s, profile %s): micro-batches of %d, predicted %.0f tokens/s, step %.3f s "
               "(recompute %.3f s, exposed transfer %.3f s); %s, gap %.2f%%, solved in %.2f s",
               pl->method, pl->profile, pl->micro_batch, pl->tokens_per_s, pl->step_time, pl->t_recompute,
               pl->t_exposed, pl->optimal ? "optimal" : "not proven optimal", 100 * pl->gap, pl->solve_time);
      post(r, m);
    } else {
      free(m); // the job still runs its plan; a restart plans it again
    }
  }
  free(svg);
  return 0;
}

// eng_spec.note, on the runner thread.
static void on_note(void *ctx, const char *line) {
  runner *r = ctx;
  runner_msg *m = msg_new(r, RUN_NOTE);
  if (m) snprintf(m->error, sizeof m->error, "%s", line);
  post(r, m);
}

// The engine's threads (copy lanes, optimizer, OpenMP) are started from this
// one and inherit its policy and niceness (both per thread on Linux), so
// that on busy cores the loop, the gRPC and the commit threads answer
// clients ahead of a training step. A nice value (runner_nice) only weighs
// shares: the scheduler wakes a thread on the core its waker runs on and
// leaves it queued there behind the other woken threads while the second
// core runs a niced step (perf sched under tests/bench/api.sh: the API
// threads waited up to 7 ms on one core, the runner had the other). A core
// that runs only SCHED_IDLE threads counts as idle, and a woken thread
// takes it at once (runner_idle, the default). A job's thread preempted
// while it holds a lock the daemon's threads want (its mailbox, RocksDB's)
// runs again as soon as they wait for it: waiting, they leave a core idle.
static void set_sched(runner *r) {
  int policy = r->idle ? SCHED_IDLE : SCHED_OTHER;
  struct sched_param sp = {0};
  if (sched_getscheduler(0) != policy && sched_setscheduler(0, policy, &sp))
    log_warn("job %s: its threads stay %s: %s (leaving SCHED_IDLE takes CAP_SYS_NICE or a restart)", r->work_job,
             r->idle ? "off SCHED_IDLE" : "SCHED_IDLE", strerror(errno));
  if (getpriority(PRIO_PROCESS, (id_t)gettid()) == r->nice) return;
  if (setpriority(PRIO_PROCESS, (id_t)gettid(), r->nice))
    log_warn("job %s: its threads stay at niceness %d, not runner_nice %d: %s (lowering it takes CAP_SYS_NICE or a "
             "restart)", r->work_job, getpriority(PRIO_PROCESS, (id_t)gettid()), r->nice, strerror(errno));
}

static void run_job(runner *r) {
  spec_plan *p = &r->plan;
  eng_err e = {0};
  set_sched(r);
  eng_store st;
  if (store_engine_open(&st, r->st, r->work_job, p->ckpt_keep, &e)) {
    set_done(r, RUN_FAILED, 0, e.msg);
    return;
  }
  p->eng.cancel = &r->cancel;
  p->eng.note = on_note;
  p->eng.note_ctx = r;
  p->eng.spill = &st; // for the boundaries the policy spills
  eng_run *run = NULL;
  // MFU on a GPU is against the configured profile's rate (the cpu backend
  // measures its own).
  if (p->eng.device_gpu >= 0 && !p->eng.peak_flops) p->eng.peak_flops = planning_peak(r->planning);
  int rc = p->use_planner ? plan_apply(r, p, &e) : 0;
  if (!rc) rc = eng_open(&p->eng, &run, &e);
  if (!rc) {
    rc = eng_load(run, &st, &e);
    if (rc >= 0) {
      r->steps = eng_steps_done(run); // before the loop hears of it, like every step below
      runner_msg *m = msg_new(r, RUN_STARTED);
      if (m) {
        m->step = rc == 1 ? -1 : eng_steps_done(run);
        m->params = (int64_t)eng_param_count(run);
      }
      post(r, m);
      rc = 0;
    }
  }
  int64_t saved = run ? eng_steps_done(run) : 0;
  while (!rc && eng_steps_done(run) < p->total_steps && !eng_run_govern(run)->stop) {
    runner_msg *m = msg_new(r, RUN_STEP);
    eng_metrics mm;
    rc = eng_step(run, m ? &m->m : &mm, &e);
    if (rc) {
      free(m);
      break;
    }
    int64_t done = eng_steps_done(run);
    r->steps = done;
    eng_err ignored; // a step without its drawing is still a step
    if (m && eng_timeline_svg(run, &m->m, &m->text, &ignored)) m->text = NULL;
    post(r, m);
    if (done < p->total_steps && !eng_run_govern(run)->stop && done % p->ckpt_every == 0 &&
        !(rc = save(r, run, &st, &e)))
      saved = done;
  }
  int64_t steps = run ? eng_steps_done(run) : 0;
  if (rc == ENG_ECANCEL && r->stop) {
    // Stopped for a preemption or a drain: the step in flight left no
    // trace, so the state to save is the last completed step's.
    r->cancel = 0;
    rc = steps > saved ? save(r, run, &st, &e) : 0;
    set_done(r, rc ? RUN_FAILED : RUN_STOPPED, steps, rc ? e.msg : NULL);
  } else if (rc == ENG_ECANCEL) {
    set_done(r, RUN_CANCELLED, steps, NULL);
  } else if (rc) {
    set_done(r, RUN_FAILED, steps, e.msg);
  } else if (steps > saved && (rc = save(r, run, &st, &e))) {
    set_done(r, RUN_FAILED, steps, e.msg);
  } else {
    set_done(r, RUN_SUCCEEDED, steps, NULL);
  }
  if (run) eng_close(run);
  st.close(st.ctx);
}

static void thread_main(void *arg) {
  runner *r = arg;
  pthread_setname_np(pthread_self(), "traind-run");
  for (;;) {
    uv_mutex_lock(&r->lock);
    while (!r->has_work && !r->quit) uv_cond_wait(&r->cond, &r->lock);
    if (r->quit) {
      uv_mutex_unlock(&r->lock);
      return;
    }
    uv_mutex_unlock(&r->lock);
    run_job(r);
    // Idle before the report goes out: the loop may start the next job the
    // moment it reads it.
    uv_mutex_lock(&r->lock);
    spec_plan_free(&r->plan);
    runner_msg *done = r->done_msg;
    r->done_msg = NULL;
    r->has_work = 0;
    uv_mutex_unlock(&r->lock);
    post(r, done);
  }
}

static void on_msg(mbox *b, mbox_item *it) {
  runner *r = b->data;
  runner_msg *m = (runner_msg *)it;
  if (m->kind == RUN_DONE) r->job[0] = 0; // idle from the loop's point of view
  r->fn(r, m, r->data);
}

int runner_create(runner **out, uv_loop_t *loop, store *st, planning *planning, runner_fn fn, void *data) {
  runner *r = calloc(1, sizeof *r);
  if (!r) return -1;
  r->loop = loop;
  r->st = st;
  r->planning = planning;
  r->fn = fn;
  r->data = data;
  if (uv_mutex_init(&r->lock) || uv_cond_init(&r->cond) || mbox_init(&r->mb, loop, on_msg, r)) {
    free(r);
    return -1;
  }
  if (uv_thread_create(&r->thread, thread_main, r)) {
    mbox_close(&r->mb, NULL);
    return -1;
  }
  *out = r;
  return 0;
}

int runner_start(runner *r, const char *job, spec_plan *plan, int nice, int idle) {
  runner_msg *done = calloc(1, sizeof *done);
  if (!done) return -1;
  done->kind = RUN_DONE;
  snprintf(done->job, sizeof done->job, "%s", job);
  snprintf(r->job, sizeof r->job, "%s", job);
  uv_mutex_lock(&r->lock);
  r->done_msg = done;
  memcpy(r->work_job, r->job, sizeof r->job);
  r->plan = *plan;
  memset(plan, 0, sizeof *plan);
  r->nice = nice;
  r->idle = idle;
  r->cancel = 0;
  r->stop = 0;
  r->steps = -1;
  r->has_work = 1;
  uv_cond_signal(&r->cond);
  uv_mutex_unlock(&r->lock);
  return 0;
}

int64_t runner_cancel(runner *r) {
  r->stop = 0;
  r->cancel = 1;
  // The flag before the count: a step the runner starts after the count
  // was read finds the flag set at its first layer.
  atomic_thread_fence(memory_order_seq_cst);
  return r->steps;
}

void runner_stop(runner *r) {
  r->stop = 1;
  r->cancel = 1;
}

const char *runner_job(const runner *r) { return r->job[0] ? r->job : NULL; }

static void on_closed(uv_handle_t *h) {
  runner *r = ((mbox *)h->data)->data;
  void (*done)(void *) = r->done;
  void *arg = r->done_arg;
  uv_mutex_destroy(&r->lock);
  uv_cond_destroy(&r->cond);
  free(r);
  if (done) done(arg);
}

void runner_destroy(runner *r, void (*done)(void *), void *arg) {
  uv_mutex_lock(&r->lock);
  r->quit = 1;
  uv_cond_signal(&r->cond);
  uv_mutex_unlock(&r->lock);
  uv_thread_join(&r->thread);
  r->done = done;
  r->done_arg = arg;
  mbox_close(&r->mb, on_closed);
}
