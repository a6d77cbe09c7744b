#include "exec/exec.h"

#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda.h"
#include "common/clock.h"
#include "exec/exec_impl.h"
#include "optim/adamw.h"
#include "optim/adamw.h"
#include "kernels/kernels.h"
#include "optim/adamw8.h"


static int is_ckpt(const eng_exec *x, int l) { return x->place[l] != ENG_PLACE_NONE; }

// The policy as the step's schedule (exec_sched.h): a plan's, the caller's
// arrays, or the uniform policy's. Refuses what cannot run.
static int policy_sched(const eng_config *c, const eng_exec_policy *p, size_t bnd_bytes, exec_sched *s, eng_err *e) {
  const int L = c->n_layers;
  const eng_plan *pl = p->plan;
  if (pl && (pl->batch != p->batch || pl->seq_len != p->seq_len || pl->n_micro != p->micro_batches))
    return eng_err_set(e, ENG_EINVAL, "plan: made for batch %d x %d in %d micro-batches; the run has %d x %d in %d",
                       pl->batch, pl->seq_len, pl->n_micro, p->batch, p->seq_len, p->micro_batches);
  eng_place place[L];
  uint8_t keep[L];
  for (int l = 0; l < L && !p->plan; l++) {
    place[l] = l == 0 || (p->ckpt_every > 0 && l % p->ckpt_every == 0) ? p->ckpt_place : ENG_PLACE_NONE;
    keep[l] = p->keep_acts != 0;
    if (place[l] < ENG_PLACE_DEVICE || place[l] > ENG_PLACE_NONE)
      return eng_err_set(e, ENG_EINVAL, "policy: boundary %d has an unknown place %d", l, place[l]);
  }
  return p->plan ? exec_sched_build(s, L, bnd_bytes, NULL, NULL, p->plan, e)
                 : exec_sched_build(s, L, bnd_bytes, place, keep, NULL, e);
}

// A run that spills needs a store with activation entries (sizing does not).
static int spill_ok(const eng_exec *x, eng_err *e) {
  const eng_store *st = x->p.spill;
  for (int l = 0; l < x->L; l++)
    if (x->place[l] == ENG_PLACE_STORE && (!st || !st->act_put || !st->act_get || !st->act_drop))
      return eng_err_set(e, ENG_EINVAL, "policy: boundary %d goes to the store, but there is no spill store with "
                         "activation entries", l);
  return 0;
}

// ---- arena plan --------------------------------------------------------------
// One function lays out the arena both to size it (dev == NULL) and to carve
// it, so the bytes refused up front are exactly the bytes used.

typedef struct carve {
  eng_dev *dev;
  size_t align;
  size_t bytes;
} carve;

static void *take(carve *c, size_t bytes) {
  size_t n = (bytes + c->align - 1) & ~(c->align - 1);
  c->bytes += n;
  return c->dev ? eng_dev_alloc(c->dev, n) : NULL;
}

// The backend that computes a policy's arena; ENG_EDEVICE when this build
// has none for it.
static int ops_for(const eng_exec_policy *p, const exec_ops **ops, eng_err *e) {
  *ops = &eng_exec_cpu_ops;
  if (!p->cuda) return 0;
#ifdef TRAIND_HAVE_CUDA
  (void)e;
  *ops = &eng_exec_cuda_ops;
  return 0;
#else
  return eng_err_set(e, ENG_EDEVICE, ENG_DEV_NO_CUDA);
#endif
}

static int sizes_of(const eng_config *c, const eng_exec_policy *p, exec_sizes *z, eng_err *e) {
  return p->cuda ? eng_exec_cuda_sizes(c, p, z, e) : eng_exec_cpu_sizes(c, p, z, e);
}

// Layers that keep their inner activations.
static int kept_layers(const eng_exec *x, int L) {
  int kept = 0;
  for (int l = 0; l < L; l++) kept += x->keep[l];
  return kept;
}

// One micro-batch's layer activations, as laid out back to back: the
// workspace (index 0, which every layer that recomputes shares, always
// there so that the arena is linear in the kept layers), then each kept
// layer's micro-batches.
static size_t acts_stride(const exec_sizes *z) { return (z->acts + z->align - 1) & ~(z->align - 1); }

static void layout_arena(eng_exec *x, const eng_config *c, const eng_exec_policy *p, carve *cv) {
  eng_layout lo;
  eng_layout_init(&lo, c);
  const int L = c->n_layers, mb = p->batch / p->micro_batches, T = p->seq_len;
  const exec_sizes *z = &x->z;
  size_t slot = exec_slot_values(&lo);
  size_t mbn = (size_t)mb * T;
  cv->align = z->align;
  for (int i = 0; i < 2; i++) x->wslot[i] = take(cv, slot * z->weight);
  for (int i = 0; i < 2; i++) x->gslot[i] = take(cv, slot * sizeof(float));
  x->xa = take(cv, x->bnd_bytes);
  x->xb = take(cv, x->bnd_bytes);
  for (int k = 0; k < x->win.n_pool; k++) x->pool[k] = take(cv, x->bnd_bytes);
  // Workspace for the layers that recompute, and the kept activations.
  size_t regions = 1 + (size_t)kept_layers(x, L) * p->micro_batches;
  x->acts_buf = take(cv, acts_stride(z) * regions);
  x->scratch_buf = take(cv, z->scratch);
  x->ybuf = take(cv, mbn * c->d_model * z->act);
  x->h_xn = take(cv, mbn * c->d_model * z->act);
  x->h_rstd = take(cv, mbn * sizeof(float));
  x->h_dxn = take(cv, mbn * c->d_model * z->act);
  x->h_scratch = take(cv, z->head_scratch);
  x->own = z->own ? take(cv, z->own) : NULL;
}

// One boundary of the whole batch on this backend.
static size_t bnd_bytes_of(const eng_config *c, const eng_exec_policy *p, const exec_sizes *z) {
  return (size_t)p->batch * p->seq_len * c->d_model * z->act;
}

int eng_exec_arena_of(const eng_config *c, const eng_exec_policy *p, eng_exec_arena *a, eng_err *e) {
  const int L = c->n_layers;
  eng_exec tmp;
  memset(&tmp, 0, sizeof tmp);
  int rc = sizes_of(c, p, &tmp.z, e);
  if (rc) return rc;
  if (p->micro_batches < 1 || p->batch % p->micro_batches)
    return eng_err_set(e, ENG_EINVAL, "spec: micro_batches (%d) must divide batch (%d)", p->micro_batches, p->batch);
  uint8_t none[L];
  memset(none, 0, sizeof none);
  tmp.keep = none; // no kept layer, an empty pool: what every policy needs
  tmp.bnd_bytes = bnd_bytes_of(c, p, &tmp.z);
  carve cv = {NULL, 0, 0};
  layout_arena(&tmp, c, p, &cv);
  a->fixed = cv.bytes;
  a->bnd = (tmp.bnd_bytes + tmp.z.align - 1) & ~(tmp.z.align - 1);
  a->inner = acts_stride(&tmp.z) * (size_t)p->micro_batches;
  a->bnd_bytes = tmp.bnd_bytes;
  return 0;
}

int eng_exec_tiers_of(const eng_config *c, const eng_exec_policy *p, eng_exec_tiers *t, eng_err *e) {
  const int L = c->n_layers;
  eng_exec tmp;
  memset(&tmp, 0, sizeof tmp);
  int rc;
  if ((rc = sizes_of(c, p, &tmp.z, e))) return rc;
  tmp.bnd_bytes = bnd_bytes_of(c, p, &tmp.z);
  if ((rc = policy_sched(c, p, tmp.bnd_bytes, &tmp.win, e))) return rc;
  void *pool[tmp.win.n_pool + 1];
  tmp.pool = pool;
  tmp.place = tmp.win.place;
  tmp.keep = tmp.win.keep;
  carve cv = {NULL, 0, 0};
  layout_arena(&tmp, c, p, &cv);
  memset(t, 0, sizeof *t);
  t->device = cv.bytes;
  for (int l = 0; l < L; l++) {
    if (tmp.place[l] == ENG_PLACE_HOST) t->host += tmp.bnd_bytes;
    if (tmp.place[l] == ENG_PLACE_STORE) t->store += tmp.bnd_bytes;
  }
  exec_sched_free(&tmp.win);
  return 0;
}

// ---- timeline ------------------------------------------------------------------

static void span_add(eng_exec *x, eng_span_lane lane, double t0, double t1, const char *what, int index) {
  int i = atomic_fetch_add(&x->n_spans, 1);
  if (i >= x->cap_spans) return;
  eng_plan_span *sp = &x->spans[i];
  sp->lane = lane;
  sp->t0 = t0 - x->t_run0;
  sp->t1 = t1 - x->t_run0;
  if (index >= 0) snprintf(sp->what, sizeof sp->what, "%s%d", what, index);
  else snprintf(sp->what, sizeof sp->what, "%s", what);
}

// A shard as the simulator names it on a timeline: its layer, -1 the head.
static int span_layer(const eng_exec *x, int shard) { return shard == x->L + 1 ? -1 : shard - 1; }

int eng_exec_timeline(const eng_exec *x, const eng_plan_span **spans) {
  int n = atomic_load(&x->n_spans);
  *spans = x->spans;
  return n < x->cap_spans ? n : x->cap_spans;
}

// ---- versions: the next step's copy of a shard waits for its update --------

static void version_wait(eng_exec *x, int shard, int64_t need) {
  pthread_mutex_lock(&x->vmu);
  while (x->version[shard] < need) pthread_cond_wait(&x->vcv, &x->vmu);
  pthread_mutex_unlock(&x->vmu);
}

static void version_bump(eng_exec *x, int shard) {
  pthread_mutex_lock(&x->vmu);
  x->version[shard]++;
  pthread_cond_broadcast(&x->vcv);
  pthread_mutex_unlock(&x->vmu);
}

static void opt_run(void *arg);

// The update of shard s in round r (1-based).
static opt_job *round_job(eng_exec *x, int64_t r, int s) {
  return &x->opt_jobs[(size_t)(r & 1) * x->m->lo.n_shards + s];
}

// Shard s is about to be read: with inline updates, apply its pending one
// now on the compute thread (which owns the cores); otherwise the optimizer
// worker does it and readers wait on the version.
static void shard_ensure(eng_exec *x, int s) {
  if (x->inline_opt && x->version[s] < x->rounds) {
    double t0 = eng_now();
    opt_run(round_job(x, x->version[s] + 1, s));
    span_add(x, ENG_SPAN_OPT, t0, eng_now(), "opt", -1);
  }
}

// ---- copy-in -----------------------------------------------------------------

// What streams of shard s, and its bytes per value: the bf16 working copy
// where the model keeps one (a GPU, or the cpu's eng_spec.work_bf16), else
// the fp32 master.
static const char *streamed(const eng_exec *x, int s, size_t *z) {
  const eng_shard *sh = &x->m->shards[s];
  *z = sh->work ? sizeof(uint16_t) : sizeof(float);
  return sh->work ? (const char *)sh->work : (const char *)sh->w;
}

static void copy_in_run(void *arg) {
  copy_job *j = arg;
  eng_exec *x = j->x;
  double t0 = eng_now();
  eng_model *m = x->m;
  const int head = m->lo.n_layers + 1;
  const size_t wz = x->z.weight;
  char *dst = x->wslot[j->slot];
  size_t z, z0; // bytes per value of what streams (z0: the tied embedding's)
  if (j->shard == head) {
    const eng_layout *lo = &m->lo;
    version_wait(x, head, j->need);
    version_wait(x, 0, j->need);
    const char *hw = streamed(x, head, &z);
    x->ops->weights_in(x, j->slot, dst, hw + lo->final_norm.off * z, lo->final_norm.numel);
    const char *mat = lo->lm_head.numel ? hw + lo->lm_head.off * z : streamed(x, 0, &z0);
    x->ops->weights_in(x, j->slot, dst + lo->final_norm.numel * wz, mat, lo->embed.numel);
  } else if (m->shards[j->shard].base) {
    // A bf16 base (the cpu backend's POET-X) widens into the slot, which is
    // host memory there.
    version_wait(x, j->shard, j->need);
    eng_model_shard_get(m, j->shard, (float *)dst);
  } else {
    version_wait(x, j->shard, j->need);
    x->ops->weights_in(x, j->slot, dst, streamed(x, j->shard, &z), m->shards[j->shard].numel);
  }
  span_add(x, ENG_SPAN_H2D, t0, eng_now(), "w", span_layer(x, j->shard));
}

static void sched_submit(eng_exec *x, int i) {
  if (i >= x->n_sched) return;
  int slot = i & 1;
  x->cjobs[slot] = (copy_job){x, x->sched[i], slot, x->rounds};
  x->cticket[slot] = eng_worker_submit(&x->copy_in, copy_in_run, &x->cjobs[slot]);
}

// Weights of the next shard in the schedule; waits for its copy.
static const void *sched_acquire(eng_exec *x, int shard, double *t_wait) {
  int i = x->next_acquire++;
  int slot = i & 1;
  (void)shard; // the schedule was built in compute order; shard documents the call site
  // The copies of this entry and the next wait for their shards' updates.
  const int head = x->m->lo.n_layers + 1;
  for (int k = i; k <= i + 1 && k < x->n_sched; k++) {
    if (x->sched[k] == head) shard_ensure(x, 0);
    shard_ensure(x, x->sched[k]);
  }
  double t0 = eng_now();
  eng_worker_wait(&x->copy_in, x->cticket[slot]);
  *t_wait += eng_now() - t0;
  return x->wslot[slot];
}

// Compute is done with the slot of schedule entry i: refill it with entry i+2.
static void sched_release(eng_exec *x) {
  x->ops->slot_free(x, (x->next_acquire - 1) & 1);
  sched_submit(x, x->next_acquire + 1);
}

static void sched_begin(eng_exec *x) {
  x->next_acquire = 0;
  sched_submit(x, 0);
  sched_submit(x, 1);
}

// ---- copy-out ----------------------------------------------------------------

static void copy_out_run(void *arg) {
  out_job *j = arg;
  eng_exec *x = j->x;
  omp_set_num_threads(1); // beside compute: no OpenMP team of its own
  double t0 = eng_now();
  x->ops->grad_out(x, j->slot, j->shard);
  span_add(x, ENG_SPAN_D2H, t0, eng_now(), "g", span_layer(x, j->shard));
  if (x->early) eng_worker_submit(&x->optim, opt_run, round_job(x, x->rounds + 1, j->shard));
}

// Gradient slot i & 1 for the next shard, zeroed once its last copy-out is done.
static int gslot_begin(eng_exec *x, int i, size_t floats, double *t_wait, eng_err *e) {
  double t0 = eng_now();
  eng_worker_wait(&x->copy_out, x->oticket[i & 1]);
  *t_wait += eng_now() - t0;
  return x->ops->grad_zero(x, i & 1, floats, e);
}

// The shard's backward is queued: finish its gradients and send them out.
static int gslot_end(eng_exec *x, int i, int shard, eng_err *e) {
  int rc = x->ops->grad_finish(x, i & 1, shard, e);
  if (rc) return rc;
  x->ojobs[i & 1] = (out_job){x, shard, i & 1};
  x->oticket[i & 1] = eng_worker_submit(&x->copy_out, copy_out_run, &x->ojobs[i & 1]);
  return 0;
}

// ---- optimizer -----------------------------------------------------------------

// POET-X: the layer's θ by Adam, then its merge when the round has one.
static void opt_poet(eng_exec *x, int l, const eng_exec_update *u) {
  eng_poet_model *pm = &x->m->poet;
  eng_poet_lstate *s = &pm->layers[l];
  eng_adamw8_hparams h = {u->poet_lr, 0.0f, u->beta1, u->beta2, 1e-6f, u->clip_scale, u->poet_t};
  eng_adamw8_io io = {.w = s->theta, .g = s->g, .g_type = pm->g_bf16 ? ENG_ADAMW8_BF16 : ENG_ADAMW8_F32};
  eng_err ignored; // the arguments are built here: an error would be a bug caught by the tests
  eng_adamw8_update(&s->opt, &io, &h, ENG_ISA_AUTO, NULL, &ignored);
  if (u->poet_merge > 0)
    eng_poet_model_merge(pm, &x->m->lo, l, x->m->shards[l + 1].w, x->m->shards[l + 1].base, u->seed, u->poet_merge,
                         pm->merge_work);
}

static void opt_run(void *arg) {
  opt_job *j = arg;
  eng_exec *x = j->x;
  eng_shard *sh = &x->m->shards[j->shard];
  const eng_exec_update *u = &j->u;
  for (int i = 0; i < sh->n_tensors; i++) {
    if (sh->frozen[i]) continue;
    const eng_tensor *t = &sh->tensors[i];
    // Decoupled weight decay applies to matrices only.
    eng_adamw8_hparams h = {u->lr, t->cols ? u->weight_decay : 0.0f, u->beta1, u->beta2, u->eps, u->clip_scale, u->t};
    // The tensor's elements whose state this process holds (model.h: opt_off).
    const size_t o = sh->opt_off[i];
    eng_adamw8_io io = {.w = sh->w + sh->w_off[i] + (sh->w_part ? 0 : o), // a master in parts holds just these
                        .g = sh->g_bf16 ? (const void *)((const uint16_t *)sh->g + sh->g_off[i] + o)
                                        : (const void *)((const float *)sh->g + sh->g_off[i] + o),
                        .g_type = sh->g_bf16 ? ENG_ADAMW8_BF16 : ENG_ADAMW8_F32};
    if (sh->work) io.work = sh->work + t->off + o, io.work_type = ENG_ADAMW8_BF16; // what the next step streams
    if (j->shard == 0 && x->m->row_of) io.g_rows = x->m->row_of, io.g_row_len = (size_t)x->m->cfg.d_model;
    eng_err ignored; // the arguments are built here: an error would be a bug caught by the tests
    eng_adamw8_update(&sh->opt[i], &io, &h, ENG_ISA_AUTO, NULL, &ignored);
  }
  if (x->m->poet.layers && j->shard >= 1 && j->shard <= x->m->lo.n_layers) opt_poet(x, j->shard - 1, u);
  version_bump(x, j->shard);
}

void eng_exec_update_launch(eng_exec *x, const eng_exec_update *u) {
  // The order the next forward needs them: embedding, layers, head.
  x->rounds++;
  for (int s = 0; s < x->m->lo.n_shards; s++) {
    *round_job(x, x->rounds, s) = (opt_job){x, s, *u};
    if (!x->inline_opt) eng_worker_submit(&x->optim, opt_run, round_job(x, x->rounds, s));
  }
}

void eng_exec_update_arm(eng_exec *x, const eng_exec_update *u) {
  for (int s = 0; s < x->m->lo.n_shards; s++) *round_job(x, x->rounds + 1, s) = (opt_job){x, s, *u};
  x->armed = 1;
  x->early = !x->inline_opt;
}

// The armed round becomes an ordinary launched one at the end of the run.
// With early updates, the embedding (whose gradient the compute thread just
// finished) goes last; on an aborted run, shards that did not update are
// marked done so every shard's version agrees (their update is lost: a
// cancelled lagged step is only partly applied).
static void armed_finish(eng_exec *x, int ok) {
  if (!x->armed) return;
  if (x->early) {
    if (ok) {
      eng_worker_submit(&x->optim, opt_run, round_job(x, x->rounds + 1, 0));
    } else {
      eng_worker_drain(&x->optim);
      for (int s = 0; s < x->m->lo.n_shards; s++)
        if (x->version[s] == x->rounds) version_bump(x, s);
    }
  }
  x->rounds++;
  x->armed = x->early = 0;
}

void eng_exec_quiesce(eng_exec *x) {
  for (int s = 0; s < x->m->lo.n_shards; s++) shard_ensure(x, s);
  eng_worker_drain(&x->optim);
  eng_worker_drain(&x->copy_in);
  eng_worker_drain(&x->copy_out);
}

// ---- open / close --------------------------------------------------------------

// Splits acts_buf as layout_arena sized it: the workspace first, then each
// keeping layer's micro-batches in order.
static void acts_regions(eng_exec *x) {
  char *ab = x->acts_buf;
  const size_t stride = acts_stride(&x->z);
  x->acts_at[0] = ab;
  ab += stride;
  for (int l = 0; l < x->L; l++)
    for (int i = 0; x->keep[l] && i < x->p.micro_batches; i++, ab += stride) x->acts_at[exec_acts_index(x, l, i)] = ab;
}

int eng_exec_open(eng_exec **out, eng_model *m, eng_dev *dev, const eng_exec_policy *p, eng_err *e) {
  const eng_config *c = &m->cfg;
  if (p->micro_batches < 1 || p->batch % p->micro_batches != 0)
    return eng_err_set(e, ENG_EINVAL, "spec: micro_batches (%d) must divide batch (%d)",
                       p->micro_batches, p->batch);
  if ((p->cuda == 0) != (dev->host_compute != 0))
    return eng_err_set(e, ENG_EINVAL, "policy: laid out for the %s backend, but the device is %s",
                       p->cuda ? "cuda" : "cpu", dev->name);
  if (p->cuda && !m->shards[0].work)
    return eng_err_set(e, ENG_EINVAL, "model: the cuda backend streams bf16 working copies, and the model "
                       "holds none (eng_model_opts.work_bf16)");
  eng_exec_tiers tiers;
  const exec_ops *ops;
  int rc = eng_exec_tiers_of(c, p, &tiers, e);
  if (rc || (rc = ops_for(p, &ops, e))) return rc;
  eng_exec *x = calloc(1, sizeof *x);
  if (!x) return eng_err_set(e, ENG_ENOMEM, "cannot allocate the executor");
  x->m = m;
  x->dev = dev;
  x->p = *p;
  x->p.plan = NULL; // resolved into x->win: the caller's plan need not outlive open
  x->L = c->n_layers;
  x->mb = p->batch / p->micro_batches;
  x->ops = ops;
  sizes_of(c, p, &x->z, e); // accepted by eng_exec_tiers_of
  x->bnd_bytes = bnd_bytes_of(c, p, &x->z);
  if ((rc = policy_sched(c, p, x->bnd_bytes, &x->win, e))) { // accepted above: only ENOMEM is left
    free(x);
    return rc;
  }
  x->place = x->win.place;
  x->keep = x->win.keep;
  // Refused before anything is allocated: a missing spill store, a cap too small.
  char what[160];
  snprintf(what, sizeof what, "two layer slots, two gradient slots, the boundary buffers, the kept "
           "activations and one micro-batch of %d", p->batch / p->micro_batches);
  if ((rc = spill_ok(x, e)) || (rc = eng_dev_reserve(dev, tiers.device, what, e))) {
    exec_sched_free(&x->win);
    free(x);
    return rc;
  }
  x->pool = calloc((size_t)x->win.n_pool + 1, sizeof *x->pool);
  x->ljobs = calloc((size_t)x->win.n_xfer + 1, sizeof *x->ljobs);
  x->pieces = calloc((size_t)x->win.n_piece + 1, sizeof *x->pieces);
  x->stage_cache = calloc((size_t)x->win.n_piece + 1, sizeof *x->stage_cache);
  x->cap_spans = 8 * x->L + 2 * m->lo.n_shards + x->win.n_xfer + 64;
  x->spans = calloc((size_t)x->cap_spans, sizeof *x->spans);
  x->ckpt_host = calloc((size_t)x->L, sizeof *x->ckpt_host);
  x->version = calloc((size_t)m->lo.n_shards, sizeof *x->version);
  x->sumsq = calloc((size_t)m->lo.n_shards, sizeof *x->sumsq);
  x->opt_jobs = calloc(2 * (size_t)m->lo.n_shards, sizeof *x->opt_jobs);
  x->targets = malloc(sizeof(int32_t) * (size_t)p->batch * p->seq_len);
  x->acts_at = calloc(1 + (size_t)x->L * p->micro_batches, sizeof *x->acts_at);
  pthread_mutex_init(&x->lane_mu, NULL);
  eng_link_init(&x->spill_w, p->spill_bps);
  eng_link_init(&x->spill_r, p->spill_bps);
  if (!x->pool || !x->ljobs || !x->pieces || !x->spans || !x->stage_cache || !x->ckpt_host || !x->version || !x->sumsq || !x->opt_jobs ||
      !x->targets || !x->acts_at) {
    eng_exec_close(x);
    return eng_err_set(e, ENG_ENOMEM, "cannot allocate the executor's tables");
  }
  for (int l = 0; l < x->L; l++) x->spills |= x->place[l] == ENG_PLACE_STORE;
  carve cv = {dev, 0, 0};
  layout_arena(x, c, p, &cv);
  acts_regions(x);
  if ((rc = x->ops->open(x, e))) {
    eng_exec_close(x);
    return rc;
  }
  for (int l = 0; l < x->L; l++) {
    if (x->place[l] != ENG_PLACE_HOST) continue;
    if ((rc = x->ops->host_alloc(x, &x->ckpt_host[l], x->bnd_bytes, e))) {
      eng_exec_close(x);
      eng_err_prefix(e, "the host checkpoint of boundary %d: ", l);
      return rc;
    }
  }
  pthread_mutex_init(&x->vmu, NULL);
  pthread_cond_init(&x->vcv, NULL);
  x->inline_opt = dev->host_compute && !p->opt_thread;
  int lanes_ok = 1;
  for (int k = 0; k < ENG_LANE_COUNT; k++) lanes_ok &= eng_worker_start(&x->lane[k], 64, "traind-lane") == 0;
  if (!lanes_ok || eng_worker_start(&x->copy_in, 4, "traind-copy-in") || eng_worker_start(&x->copy_out, 4, "traind-copy-out") ||
      (!x->inline_opt && eng_worker_start(&x->optim, (uint32_t)m->lo.n_shards + 1, "traind-optim"))) {
    eng_exec_close(x);
    return eng_err_set(e, ENG_ENOMEM, "cannot start the executor's stream threads");
  }
  *out = x;
  return 0;
}

void eng_exec_close(eng_exec *x) {
  if (!x) return;
  eng_worker_stop(&x->copy_in);
  eng_worker_stop(&x->copy_out);
  eng_worker_stop(&x->optim);
  for (int k = 0; k < ENG_LANE_COUNT; k++) eng_worker_stop(&x->lane[k]);
  if (x->version) {
    pthread_mutex_destroy(&x->vmu);
    pthread_cond_destroy(&x->vcv);
  }
  if (x->ckpt_host)
    for (int l = 0; l < x->L; l++)
      if (x->ckpt_host[l]) x->ops->host_free(x->ckpt_host[l]);
  if (x->ops) x->ops->close(x);
  free(x->ckpt_host);
  free(x->pool);
  free(x->ljobs);
  free(x->pieces);
  free(x->spans);
  for (int i = 0; i < x->n_stage; i++) x->ops->host_free(x->stage_cache[i].p);
  free(x->stage_cache);
  exec_sched_free(&x->win);
  pthread_mutex_destroy(&x->lane_mu);
  eng_link_destroy(&x->spill_w);
  eng_link_destroy(&x->spill_r);
  free(x->version);
  free(x->sumsq);
  free(x->opt_jobs);
  free(x->targets);
  free(x->acts_at);
  free(x);
}

// ---- the step ------------------------------------------------------------------

// Rows of micro-batch i inside a full-batch boundary buffer.
static void *mbrow(const eng_exec *x, const void *buf, int i) {
  return (char *)buf + x->bnd_bytes / x->p.micro_batches * i;
}

static int cancelled(volatile int *cancel) { return cancel && *cancel; }

static void build_schedule(eng_exec *x, int backward) {
  const int L = x->L, head = L + 1;
  int n = 0;
  for (int l = 0; l < L; l++) x->sched[n++] = l + 1;
  x->sched[n++] = head;
  if (backward) {
    // Blocks [c, e) from the end: re-stream c..e-2 to recompute the block's
    // inner boundaries, then e-1 down to c for the backward.
    int e = L;
    while (e > 0) {
      int c = e - 1;
      while (!is_ckpt(x, c)) c--;
      for (int l = c; l <= e - 2; l++) x->sched[n++] = l + 1;
      for (int l = e - 1; l >= c; l--) x->sched[n++] = l + 1;
      e = c;
    }
  }
  x->n_sched = n;
}

// ---- activation lanes: the plan's transfers, window by window -------------------

static void lane_fail(eng_exec *x, int rc, const eng_err *e) {
  pthread_mutex_lock(&x->lane_mu);
  if (!x->lane_rc) {
    x->lane_rc = rc;
    x->lane_err = *e;
  }
  pthread_mutex_unlock(&x->lane_mu);
}

// A staging buffer of n bytes for a store piece: a cached one of that size
// that is free, else a new one (cached when there is room).
static int staging_take(eng_exec *x, void **p, size_t n, eng_err *e) {
  pthread_mutex_lock(&x->lane_mu);
  for (int i = 0; i < x->n_stage; i++) {
    staging_buf *b = &x->stage_cache[i];
    if (!b->busy && b->n == n) {
      b->busy = 1;
      *p = b->p;
      pthread_mutex_unlock(&x->lane_mu);
      return 0;
    }
  }
  pthread_mutex_unlock(&x->lane_mu);
  int rc = x->ops->host_alloc(x, p, n, e);
  if (rc) return rc;
  pthread_mutex_lock(&x->lane_mu);
  if (x->n_stage < x->win.n_piece) x->stage_cache[x->n_stage++] = (staging_buf){*p, n, 1};
  pthread_mutex_unlock(&x->lane_mu);
  return 0;
}

static void staging_give(eng_exec *x, void *p) {
  pthread_mutex_lock(&x->lane_mu);
  for (int i = 0; i < x->n_stage; i++)
    if (x->stage_cache[i].p == p) {
      x->stage_cache[i].busy = 0;
      pthread_mutex_unlock(&x->lane_mu);
      return;
    }
  pthread_mutex_unlock(&x->lane_mu);
  x->ops->host_free(p); // one the cache had no room for
}

// One transfer on its lane's worker. A lane waits for the piece's previous
// lane in the chain copy-out, write, read, copy-in when that one ran in the
// same window; store pieces stage in host memory from their copy-out to
// their write and from their read to their copy-in.
static void lane_run(void *arg) {
  lane_job *j = arg;
  eng_exec *x = j->x;
  const exec_piece *pc = &x->win.piece[j->t->piece];
  piece_state *ps = &x->pieces[j->t->piece];
  const eng_store *st = x->p.spill;
  const int store = x->place[pc->bnd] == ENG_PLACE_STORE;
  eng_err e = {0};
  int rc = 0;
  omp_set_num_threads(1); // beside compute: no OpenMP team of its own
  double t0 = eng_now();
  switch (j->t->lane) {
  case ENG_LANE_D2H:
    if (!store) {
      x->dev->ops->copy_out(x->dev, (char *)x->ckpt_host[pc->bnd] + pc->off, j->dev, pc->n);
    } else if (!(rc = staging_take(x, &ps->staging, pc->n, &e))) {
      x->dev->ops->copy_out(x->dev, ps->staging, j->dev, pc->n);
    }
    break;
  case ENG_LANE_NVME_W:
    eng_worker_wait(&x->lane[ENG_LANE_D2H], ps->ticket[ENG_LANE_D2H]);
    if (ps->staging) {
      double t0 = eng_now();
      rc = st->act_put(st->ctx, x->runs, pc->bnd, j->t->piece, ps->staging, pc->n, &e);
      eng_link_pass(&x->spill_w, pc->n, t0);
      staging_give(x, ps->staging);
      ps->staging = NULL;
    }
    break;
  case ENG_LANE_NVME_R:
    if (!(rc = staging_take(x, &ps->staging, pc->n, &e))) {
      double t0 = eng_now();
      rc = st->act_get(st->ctx, x->runs, pc->bnd, j->t->piece, ps->staging, pc->n, &e);
      eng_link_pass(&x->spill_r, pc->n, t0);
    }
    break;
  case ENG_LANE_H2D:
    if (!store) {
      x->dev->ops->copy_in(x->dev, j->dev, (const char *)x->ckpt_host[pc->bnd] + pc->off, pc->n);
      break;
    }
    eng_worker_wait(&x->lane[ENG_LANE_NVME_R], ps->ticket[ENG_LANE_NVME_R]);
    if (ps->staging) {
      x->dev->ops->copy_in(x->dev, j->dev, ps->staging, pc->n);
      staging_give(x, ps->staging);
      ps->staging = NULL;
    }
    break;
  default: break;
  }
  static const eng_span_lane on[ENG_LANE_COUNT] = {[ENG_LANE_H2D] = ENG_SPAN_H2D, [ENG_LANE_D2H] = ENG_SPAN_D2H,
                                                   [ENG_LANE_NVME_W] = ENG_SPAN_NVME, [ENG_LANE_NVME_R] = ENG_SPAN_NVME};
  span_add(x, on[j->t->lane], t0, eng_now(), "b", pc->bnd);
  if (rc) {
    eng_err_prefix(&e, "boundary %d bytes %zu..%zu on %s: ", pc->bnd, pc->off, pc->off + pc->n,
                   eng_lane_name(j->t->lane));
    lane_fail(x, rc, &e);
  }
}

// Where boundary i's own buffer is in window w of the forward: the working
// buffer in its own window, else its pool buffer.
static char *bnd_src(const eng_exec *x, int i, int w, void *cur) {
  return w == i ? cur : x->pool[x->win.own[i]];
}

// Window w starts: a boundary the device keeps is copied from the working
// buffer (cur, in F_w) into its own, then the window's transfers go to
// their lanes, each bound to the arena bytes it moves.
static int win_begin(eng_exec *x, int w, void *cur, eng_exec_result *res, eng_err *e) {
  const exec_sched *sc = &x->win;
  if (w < x->L && x->place[w] == ENG_PLACE_DEVICE) {
    int rc = x->ops->copy(x, x->pool[sc->own[w]], cur, x->bnd_bytes, e);
    if (rc) return rc;
  }
  for (int k = sc->win_at[w]; k < sc->win_at[w + 1]; k++) {
    const exec_xfer *t = &sc->xfer[k];
    const exec_piece *pc = &sc->piece[t->piece];
    lane_job *j = &x->ljobs[k];
    *j = (lane_job){x, t, NULL};
    if (t->lane == ENG_LANE_D2H) {
      j->dev = bnd_src(x, pc->bnd, w, cur) + pc->off;
      if (x->place[pc->bnd] == ENG_PLACE_STORE) res->store_act += pc->n;
      else res->host_act += pc->n;
    } else if (t->lane == ENG_LANE_H2D) {
      j->dev = (char *)x->pool[sc->back[pc->bnd]] + pc->off;
    }
    x->pieces[t->piece].ticket[t->lane] = eng_worker_submit(&x->lane[t->lane], lane_run, j);
  }
  return 0;
}

// Window w ends when its transfers have: then a boundary whose copy-out
// runs on after F_w leaves the working buffer (cur) for its own.
static int win_end(eng_exec *x, int w, void *cur, eng_err *e) {
  double t0 = eng_now();
  for (int k = 0; k < ENG_LANE_COUNT; k++) eng_worker_drain(&x->lane[k]);
  x->res->t_act_wait += eng_now() - t0;
  if (x->lane_rc) {
    *e = x->lane_err;
    return x->lane_rc;
  }
  if (w < x->L && x->place[w] != ENG_PLACE_NONE && x->place[w] != ENG_PLACE_DEVICE && x->win.own[w] >= 0)
    return x->ops->copy(x, x->pool[x->win.own[w]], cur, x->bnd_bytes, e);
  return 0;
}

// The block start's buffer for the backward: its own (on the device), or
// the one its copy-in filled.
static const void *ckpt_at(const eng_exec *x, int l) {
  return x->pool[x->place[l] == ENG_PLACE_DEVICE ? x->win.own[l] : x->win.back[l]];
}

// Waits for the step's pending copies before an early return.
static int abort_step(eng_exec *x, int rc, eng_err *e) {
  // Queued copies may wait on pending inline updates: apply them first.
  for (int s = 0; s < x->m->lo.n_shards; s++) shard_ensure(x, s);
  eng_worker_drain(&x->copy_in);
  eng_worker_drain(&x->copy_out);
  for (int k = 0; k < ENG_LANE_COUNT; k++) eng_worker_drain(&x->lane[k]);
  for (int q = 0; q < x->win.n_piece; q++)
    if (x->pieces[q].staging) {
      staging_give(x, x->pieces[q].staging);
      x->pieces[q].staging = NULL;
    }
  x->ops->abort(x);
  armed_finish(x, 0);
  x->n_sched = 0;
  if (rc == ENG_ECANCEL) eng_err_set(e, ENG_ECANCEL, "the run was cancelled");
  if (x->spills) {
    eng_err ignored;
    x->p.spill->act_drop(x->p.spill->ctx, x->runs, &ignored); // the step's spill is garbage now
  }
  return rc;
}

#define STEP_TRY(call)                        \
  do {                                        \
    int rc_ = (call);                         \
    if (rc_) return abort_step(x, rc_, e);    \
  } while (0)

int eng_exec_score(eng_exec *x, const int32_t *ids, const int32_t *labels, const int32_t *pos, double *seq_loss,
                   volatile int *cancel, eng_exec_result *res, eng_err *e) {
  if (x->p.cuda)
    return eng_err_set(e, ENG_ENOTSUP, "scoring samples one by one runs on the cpu backend in this build");
  x->seq_loss = seq_loss;
  int rc = eng_exec_run(x, ids, labels, pos, 0, NULL, cancel, res, e);
  x->seq_loss = NULL;
  return rc;
}

// Position ids keep exec.h's contract: the kernels read keys from a
// query's position back, so a broken one would read outside its row.
static int pos_check(const int32_t *pos, int B, int T, eng_err *e) {
  for (int b = 0; pos && b < B; b++)
    for (int t = 0; t < T; t++) {
      int32_t p = pos[(size_t)b * T + t];
      if (t == 0 && p != 0) return eng_err_set(e, ENG_EINVAL, "pos: row %d, token 0 has position %d, not 0", b, (int)p);
      if (t > 0 && p != 0 && p != pos[(size_t)b * T + t - 1] + 1)
        return eng_err_set(e, ENG_EINVAL, "pos: row %d, token %d has position %d after %d (a position is 0, "
                           "starting a document, or one more than the one before)", b, t, (int)p,
                           (int)pos[(size_t)b * T + t - 1]);
    }
  return 0;
}

void eng_exec_count_set(eng_exec *x, int64_t count) { x->count_total = count; }

int eng_exec_run(eng_exec *x, const int32_t *ids, const int32_t *labels, const int32_t *pos, int backward,
                 float *logits, volatile int *cancel, eng_exec_result *res, eng_err *e) {
  eng_model *m = x->m;
  const eng_layout *lo = &m->lo;
  const int L = x->L, T = x->p.seq_len, B = x->p.batch, nmb = x->p.micro_batches;
  const int head = L + 1;
  memset(res, 0, sizeof *res);
  int64_t over = x->count_total;
  x->count_total = 0;
  if (logits && !x->ops->logits)
    return eng_err_set(e, ENG_ENOTSUP, "the %s backend does not hand back logits (the cpu backend does)",
                       x->dev->name);
  int rc = pos_check(pos, B, T, e);
  if (rc) return rc;
  x->pos = pos;

  // Labels are aligned with ids (transformers): position t predicts labels[t+1].
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      int32_t y = t + 1 < T ? labels[(size_t)b * T + t + 1] : -1;
      x->targets[(size_t)b * T + t] = y < 0 ? -1 : y;
      res->count += y >= 0;
    }

  build_schedule(x, backward);
  if (backward) x->runs++;
  x->lane_rc = 0;
  x->res = res;
  x->t_run0 = eng_now();
  atomic_store(&x->n_spans, 0);
  sched_begin(x);
  double t0 = eng_now();

  // Embedding: rows of the host table (never the table) become boundary 0.
  shard_ensure(x, 0);
  version_wait(x, 0, x->rounds);
  STEP_TRY(x->ops->begin(x, ids, e));

  void *cur = x->xa, *nxt = x->xb;
  for (int l = 0; l < L; l++) {
    if (cancelled(cancel)) return abort_step(x, ENG_ECANCEL, e);
    if (backward) STEP_TRY(win_begin(x, exec_win_fwd(l), cur, res, e));
    const void *w = sched_acquire(x, l + 1, &res->t_wait);
    double tc = eng_now();
    for (int i = 0; i < nmb; i++)
      STEP_TRY(x->ops->layer_fwd(x, l, w, mbrow(x, cur, i), mbrow(x, nxt, i), i, exec_acts_index(x, l, i), e));
    span_add(x, ENG_SPAN_COMPUTE, tc, eng_now(), "F", l);
    sched_release(x);
    if (backward) STEP_TRY(win_end(x, exec_win_fwd(l), cur, e));
    void *t = cur;
    cur = nxt;
    nxt = t;
  }
  double t1 = eng_now();
  res->t_fwd = t1 - t0;

  // Loss fused with the head, micro-batch by micro-batch; dx of the last
  // boundary lands in nxt, which becomes dy of the backward.
  if (cancelled(cancel)) return abort_step(x, ENG_ECANCEL, e);
  if (backward) STEP_TRY(win_begin(x, L, cur, res, e));
  const void *hw = sched_acquire(x, head, &res->t_wait);
  float *hg = NULL;
  if (backward) {
    STEP_TRY(gslot_begin(x, 0, lo->final_norm.numel + lo->embed.numel, &res->t_wait, e));
    hg = x->gslot[0];
  }
  if (!over) over = res->count;
  float scale = over ? 1.0f / (float)over : 0.0f;
  double th = eng_now();
  for (int i = 0; i < nmb; i++)
    STEP_TRY(x->ops->head(x, hw, hg, mbrow(x, cur, i), backward ? mbrow(x, nxt, i) : NULL, i, logits, scale,
                          &res->loss_sum, e));
  span_add(x, ENG_SPAN_COMPUTE, th, eng_now(), "H", -1);
  sched_release(x);
  double t2 = eng_now();
  res->t_loss = t2 - t1;
  if (!backward) {
    STEP_TRY(x->ops->end(x, res, 0, e));
    return 0;
  }
  STEP_TRY(gslot_end(x, 0, head, e));
  STEP_TRY(win_end(x, L, cur, e));

  // Backward, block by block from the end.
  void *dy = nxt, *dx = cur;
  int gi = 1;
  int e_ = L;
  while (e_ > 0) {
    int cb = e_ - 1;
    while (!is_ckpt(x, cb)) cb--;
    // B_{e-1}'s window starts with the block's recompute from its start,
    // which the device kept or a copy-in of an earlier window brought back.
    STEP_TRY(win_begin(x, exec_win_bwd(L, e_ - 1), NULL, res, e));
    const void *xin0 = ckpt_at(x, cb);
    void **pool = x->pool;
    const int *rcb = x->win.rc;
    // Recompute the block's inner boundaries x_{cb+1} .. x_{e-1}.
    for (int l = cb; l <= e_ - 2; l++) {
      if (cancelled(cancel)) return abort_step(x, ENG_ECANCEL, e);
      const void *w = sched_acquire(x, l + 1, &res->t_wait);
      const void *in = l == cb ? xin0 : pool[rcb[l]];
      double tc = eng_now();
      for (int i = 0; i < nmb; i++)
        STEP_TRY(x->ops->layer_fwd(x, l, w, mbrow(x, in, i), mbrow(x, pool[rcb[l + 1]], i), i, 0, e));
      span_add(x, ENG_SPAN_COMPUTE, tc, eng_now(), "R", l);
      sched_release(x);
      res->refwd_layers++;
    }
    for (int l = e_ - 1; l >= cb; l--) {
      if (cancelled(cancel)) return abort_step(x, ENG_ECANCEL, e);
      if (l < e_ - 1) STEP_TRY(win_begin(x, exec_win_bwd(L, l), NULL, res, e));
      const void *w = sched_acquire(x, l + 1, &res->t_wait);
      STEP_TRY(gslot_begin(x, gi, eng_layout_shard_numel(lo, l + 1), &res->t_wait, e));
      float *g = x->gslot[gi & 1];
      const void *in = l == cb ? xin0 : pool[rcb[l]];
      double tc = eng_now();
      for (int i = 0; i < nmb; i++) {
        const void *xi = mbrow(x, in, i);
        int a = exec_acts_index(x, l, i);
        if (!x->keep[l]) STEP_TRY(x->ops->layer_fwd(x, l, w, xi, x->ybuf, i, a, e)); // recompute the layer's inside
        STEP_TRY(x->ops->layer_bwd(x, l, w, g, xi, i, a, mbrow(x, dy, i), mbrow(x, dx, i), e));
      }
      res->refwd_layers += !x->keep[l];
      span_add(x, ENG_SPAN_COMPUTE, tc, eng_now(), "B", l);
      sched_release(x);
      STEP_TRY(gslot_end(x, gi++, l + 1, e));
      STEP_TRY(win_end(x, exec_win_bwd(L, l), NULL, e));
      void *t = dy;
      dy = dx;
      dx = t;
    }
    e_ = cb;
  }

  // Embedding backward: scatter dx of boundary 0 into the host table's
  // gradient. Tied, the head's copy-out wrote its first contribution there
  // (wait for it); untied, the store starts from zero.
  eng_worker_drain(&x->copy_out);
  if (lo->lm_head.numel) eng_model_embed_grad_reset(m);
  STEP_TRY(x->ops->embed_bwd(x, dy, ids, e));
  if (x->spills && (rc = x->p.spill->act_drop(x->p.spill->ctx, x->runs, e))) return rc;
  x->sumsq[0] = eng_k_sumsq(m->shards[0].g, eng_model_embed_grad_floats(m));
  STEP_TRY(x->ops->end(x, res, 1, e));
  armed_finish(x, 1);
  res->t_bwd = eng_now() - t2;

  // Shard order, not completion order, so the sum is the same every run.
  for (int s = 0; s < lo->n_shards; s++) res->grad_sumsq += x->sumsq[s];
  return 0;
}
