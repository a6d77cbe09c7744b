#include "exec/exec.h"

#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/worker.h"
#include "exec/layer.h"
#include "kernels/kernels.h"
#include "common/bf16.h"
#include "optim/adamw8.h"

// One weight copy: shard `shard` into weight slot `slot`, once the shard's
// update count reaches `need`. The head stage copies the final norm and the
// head matrix (lm_head, or the embedding when tied) into one slot.
typedef struct copy_job {
  eng_exec *x;
  int shard, slot;
  int64_t need;
} copy_job;

// One gradient copy: a gradient slot's contents into the host store.
typedef struct out_job {
  eng_exec *x;
  int shard, slot;
} out_job;

typedef struct opt_job {
  eng_exec *x;
  int shard;
  eng_exec_update u;
} opt_job;

enum { MAX_SCHED = 4096 };

struct eng_exec {
  eng_model *m;
  eng_dev *dev;
  eng_exec_policy p;
  int L, mb;            // layers; sequences per micro-batch
  size_t slot_floats;   // a weight/gradient slot: max(layer shard, head stage)
  size_t bnd_floats;    // one boundary activation of the whole batch: B*T*d

  // arena
  float *wslot[2], *gslot[2];
  float *xa, *xb;       // forward: current / next boundary; backward: dy / dx
  eng_place *place;     // [L] where each boundary lives (ENG_PLACE_NONE: recomputed)
  uint8_t *keep;        // [L] layers that keep their inner activations
  int spills;           // some boundary goes to the store
  float *xc;            // staging for a checkpoint kept in host memory or the store
  float **ckpt;         // [L] boundary checkpoints on the device (NULL elsewhere)
  float **rc;           // recompute buffers for the boundaries inside a block
  int n_rc;
  float *acts_buf, *scratch_buf, *ybuf;
  eng_layer_acts acts;  // workspace of the layer being computed
  eng_layer_acts *kept; // [L * micro_batches], bound for the layers that keep activations
  eng_layer_scratch scratch;
  float *h_xn, *h_rstd, *h_dxn, *h_scratch; // loss phase, one micro-batch
  int32_t *targets;     // [B*T] shifted labels (host)
  float **ckpt_host;    // [L] host copies of the boundaries placed in host memory
  int64_t runs;         // backward passes started: the spill store's step key

  // streams
  eng_worker copy_in, copy_out, optim;
  copy_job cjobs[2];
  uint64_t cticket[2];  // copy-in ticket of what each slot holds (or will)
  out_job ojobs[2];
  uint64_t oticket[2];  // copy-out ticket that last read each gradient slot
  opt_job *opt_jobs;    // [2][shards]: round r's updates in half r % 2, since a lagged
                        // round is armed while the previous one may still be pending
  int inline_opt;       // updates run on the compute thread when first needed (cpu)
  int armed;            // an update round is armed for the run in progress
  int early;            // ... and each shard updates once its gradients are out (not inline)
  double *sumsq;        // per shard Σ g², filled by copy-out jobs

  // weight versions: updates applied per shard, and rounds launched
  pthread_mutex_t vmu;
  pthread_cond_t vcv;
  int64_t *version;
  int64_t rounds;

  // the step's weight schedule: shards in the order compute needs them
  int sched[MAX_SCHED];
  int n_sched, next_acquire;
};

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int is_ckpt(const eng_exec *x, int l) { return x->place[l] != ENG_PLACE_NONE; }

// The policy as per-boundary places and per-layer keep flags: a plan's, or
// the uniform policy's. Refuses what cannot run.
static int policy_resolve(const eng_config *c, const eng_exec_policy *p, eng_place *place, uint8_t *keep,
                          eng_err *e) {
  const int L = c->n_layers;
  for (int l = 0; l < L; l++) {
    place[l] = p->place ? p->place[l]
               : l == 0 || (p->ckpt_every > 0 && l % p->ckpt_every == 0) ? p->ckpt_place
                                                                         : ENG_PLACE_NONE;
    keep[l] = p->keep ? p->keep[l] != 0 : p->keep_acts != 0;
    if (place[l] < ENG_PLACE_DEVICE || place[l] > ENG_PLACE_NONE)
      return eng_err_set(e, ENG_EINVAL, "policy: boundary %d has an unknown place %d", l, place[l]);
    if (place[l] == ENG_PLACE_STORE && (!p->spill || !p->spill->act_put || !p->spill->act_get || !p->spill->act_drop))
      return eng_err_set(e, ENG_EINVAL, "policy: boundary %d goes to the store, but there is no spill store with "
                         "activation entries", l);
  }
  if (place[0] == ENG_PLACE_NONE)
    return eng_err_set(e, ENG_EINVAL, "policy: boundary 0 must be kept (the backward recomputes from it)");
  return 0;
}

// Longest run of layers between kept boundaries: the block a backward
// recomputes at once.
static int block_len_max(const eng_place *place, int L) {
  int best = 0, start = 0;
  for (int l = 1; l <= L; l++)
    if (l == L || place[l] != ENG_PLACE_NONE) {
      if (l - start > best) best = l - start;
      start = l;
    }
  return best;
}

// ---- arena plan --------------------------------------------------------------
// One function lays out the arena both to size it (dev == NULL) and to carve
// it, so the bytes refused up front are exactly the bytes used.

typedef struct carve {
  eng_dev *dev;
  size_t bytes;
} carve;

static float *take(carve *c, size_t floats) {
  size_t n = (floats * sizeof(float) + 63) & ~(size_t)63;
  c->bytes += n;
  return c->dev ? eng_dev_alloc(c->dev, n) : NULL;
}

static size_t head_stage_floats(const eng_config *c) {
  return (size_t)c->d_model + (size_t)c->vocab * c->d_model;
}

static void layout_arena(eng_exec *x, const eng_config *c, const eng_exec_policy *p, carve *cv) {
  eng_layout lo;
  eng_layout_init(&lo, c);
  const int L = c->n_layers, mb = p->batch / p->micro_batches, T = p->seq_len;
  size_t slot = lo.layer_numel > head_stage_floats(c) ? lo.layer_numel : head_stage_floats(c);
  size_t bnd = (size_t)p->batch * T * c->d_model, mbn = (size_t)mb * T;
  x->slot_floats = slot;
  x->bnd_floats = bnd;
  for (int i = 0; i < 2; i++) x->wslot[i] = take(cv, slot);
  for (int i = 0; i < 2; i++) x->gslot[i] = take(cv, slot);
  x->xa = take(cv, bnd);
  x->xb = take(cv, bnd);
  int staged = 0, kept = 0;
  for (int l = 0; l < L; l++) {
    staged |= x->place[l] == ENG_PLACE_HOST || x->place[l] == ENG_PLACE_STORE;
    kept += x->keep[l];
  }
  x->xc = staged ? take(cv, bnd) : NULL;
  for (int l = 0; l < L; l++) x->ckpt[l] = x->place[l] == ENG_PLACE_DEVICE ? take(cv, bnd) : NULL;
  x->n_rc = block_len_max(x->place, L) - 1;
  for (int j = 0; j < x->n_rc; j++) x->rc[j] = take(cv, bnd);
  // Workspace for the layers that recompute, and the kept activations.
  size_t acts = eng_layer_acts_floats(c, mb, T);
  int workspace = kept < L || x->n_rc > 0;
  x->acts_buf = take(cv, acts * ((size_t)workspace + (size_t)kept * p->micro_batches));
  x->scratch_buf = take(cv, eng_layer_scratch_floats(c, mb, T));
  x->ybuf = take(cv, mbn * c->d_model);
  x->h_xn = take(cv, mbn * c->d_model);
  x->h_rstd = take(cv, mbn);
  x->h_dxn = take(cv, mbn * c->d_model);
  x->h_scratch = take(cv, eng_k_head_loss_scratch_floats(c->vocab));
}

int eng_exec_tiers_of(const eng_config *c, const eng_exec_policy *p, eng_exec_tiers *t, eng_err *e) {
  const int L = c->n_layers;
  eng_exec tmp;
  float *ck[L + 1], *rc[L + 1];
  eng_place place[L];
  uint8_t keep[L];
  memset(&tmp, 0, sizeof tmp);
  int rc_ = policy_resolve(c, p, place, keep, e);
  if (rc_) return rc_;
  tmp.ckpt = ck;
  tmp.rc = rc;
  tmp.place = place;
  tmp.keep = keep;
  carve cv = {NULL, 0};
  layout_arena(&tmp, c, p, &cv);
  memset(t, 0, sizeof *t);
  t->device = cv.bytes;
  for (int l = 0; l < L; l++) {
    if (place[l] == ENG_PLACE_HOST) t->host += tmp.bnd_floats * sizeof(float);
    if (place[l] == ENG_PLACE_STORE) t->store += tmp.bnd_floats * sizeof(float);
  }
  return 0;
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
  if (x->inline_opt && x->version[s] < x->rounds) opt_run(round_job(x, x->version[s] + 1, s));
}

// ---- copy-in -----------------------------------------------------------------

static void copy_in_run(void *arg) {
  copy_job *j = arg;
  eng_exec *x = j->x;
  eng_model *m = x->m;
  const int head = m->lo.n_layers + 1;
  float *dst = x->wslot[j->slot];
  if (j->shard == head) {
    const eng_layout *lo = &m->lo;
    version_wait(x, head, j->need);
    version_wait(x, 0, j->need);
    const float *hw = m->shards[head].w;
    x->dev->ops->copy_in(x->dev, dst, hw + lo->final_norm.off, lo->final_norm.numel * sizeof(float));
    const float *mat = lo->lm_head.numel ? hw + lo->lm_head.off : m->shards[0].w;
    x->dev->ops->copy_in(x->dev, dst + lo->final_norm.numel, mat, lo->embed.numel * sizeof(float));
  } else {
    version_wait(x, j->shard, j->need);
    x->dev->ops->copy_in(x->dev, dst, m->shards[j->shard].w, m->shards[j->shard].numel * sizeof(float));
  }
}

static void sched_submit(eng_exec *x, int i) {
  if (i >= x->n_sched) return;
  int slot = i & 1;
  x->cjobs[slot] = (copy_job){x, x->sched[i], slot, x->rounds};
  x->cticket[slot] = eng_worker_submit(&x->copy_in, copy_in_run, &x->cjobs[slot]);
}

// Weights of the next shard in the schedule; waits for its copy.
static const float *sched_acquire(eng_exec *x, int shard, double *t_wait) {
  int i = x->next_acquire++;
  int slot = i & 1;
  (void)shard; // the schedule was built in compute order; shard documents the call site
  // The copies of this entry and the next wait for their shards' updates.
  const int head = x->m->lo.n_layers + 1;
  for (int k = i; k <= i + 1 && k < x->n_sched; k++) {
    if (x->sched[k] == head) shard_ensure(x, 0);
    shard_ensure(x, x->sched[k]);
  }
  double t0 = now();
  eng_worker_wait(&x->copy_in, x->cticket[slot]);
  *t_wait += now() - t0;
  return x->wslot[slot];
}

// Compute is done with the slot of schedule entry i: refill it with entry i+2.
static void sched_release(eng_exec *x) { sched_submit(x, x->next_acquire + 1); }

static void sched_begin(eng_exec *x) {
  x->next_acquire = 0;
  sched_submit(x, 0);
  sched_submit(x, 1);
}

// ---- copy-out ----------------------------------------------------------------

// Writes n gradient values of the slot into a shard's store at element off.
static void grad_store(eng_exec *x, eng_shard *sh, size_t off, const float *src, size_t n) {
  if (sh->g_bf16) {
    // The device narrows; only bf16 crosses (on the cpu, the conversion is the copy).
    eng_bf16_from_f32_n((uint16_t *)sh->g + off, src, n, ENG_ISA_AUTO);
    atomic_fetch_add(&x->dev->bytes_out, n * sizeof(uint16_t));
  } else {
    x->dev->ops->copy_out(x->dev, (float *)sh->g + off, src, n * sizeof(float));
  }
}

static void copy_out_run(void *arg) {
  out_job *j = arg;
  eng_exec *x = j->x;
  eng_model *m = x->m;
  const eng_layout *lo = &m->lo;
  const int head = lo->n_layers + 1;
  const float *src = x->gslot[j->slot];
  omp_set_num_threads(1); // beside compute: no OpenMP team of its own
  size_t n;
  if (j->shard == head) {
    eng_shard *hs = &m->shards[head];
    grad_store(x, hs, lo->final_norm.off, src, lo->final_norm.numel);
    // Tied: the head's gradient is the first contribution to the embedding's.
    if (lo->lm_head.numel) grad_store(x, hs, lo->lm_head.off, src + lo->final_norm.numel, lo->embed.numel);
    else grad_store(x, &m->shards[0], 0, src + lo->final_norm.numel, lo->embed.numel);
    n = lo->final_norm.numel + lo->lm_head.numel;
  } else {
    n = m->shards[j->shard].numel;
    grad_store(x, &m->shards[j->shard], 0, src, n);
  }
  // The norm of what the device accumulated (fp32), as a GPU reduces it on the fly.
  x->sumsq[j->shard] = eng_k_sumsq(src, n);
  if (x->early) eng_worker_submit(&x->optim, opt_run, round_job(x, x->rounds + 1, j->shard));
}

// A gradient slot for the next shard, zeroed once its last copy-out is done.
static float *gslot_begin(eng_exec *x, int i, size_t floats, double *t_wait) {
  double t0 = now();
  eng_worker_wait(&x->copy_out, x->oticket[i & 1]);
  *t_wait += now() - t0;
  memset(x->gslot[i & 1], 0, floats * sizeof(float));
  return x->gslot[i & 1];
}

static void gslot_end(eng_exec *x, int i, int shard) {
  x->ojobs[i & 1] = (out_job){x, shard, i & 1};
  x->oticket[i & 1] = eng_worker_submit(&x->copy_out, copy_out_run, &x->ojobs[i & 1]);
}

// ---- optimizer -----------------------------------------------------------------

static void opt_run(void *arg) {
  opt_job *j = arg;
  eng_exec *x = j->x;
  eng_shard *sh = &x->m->shards[j->shard];
  const eng_exec_update *u = &j->u;
  for (int i = 0; i < sh->n_tensors; i++) {
    const eng_tensor *t = &sh->tensors[i];
    // Decoupled weight decay applies to matrices only.
    eng_adamw8_hparams h = {u->lr, t->cols ? u->weight_decay : 0.0f, u->beta1, u->beta2, u->eps, u->clip_scale, u->t};
    eng_adamw8_io io = {.w = sh->w + t->off,
                        .g = sh->g_bf16 ? (const void *)((const uint16_t *)sh->g + t->off)
                                        : (const void *)((const float *)sh->g + t->off),
                        .g_type = sh->g_bf16 ? ENG_ADAMW8_BF16 : ENG_ADAMW8_F32};
    eng_err ignored; // the arguments are built here: an error would be a bug caught by the tests
    eng_adamw8_update(&sh->opt[i], &io, &h, ENG_ISA_AUTO, NULL, &ignored);
  }
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

int eng_exec_open(eng_exec **out, eng_model *m, eng_dev *dev, const eng_exec_policy *p, eng_err *e) {
  const eng_config *c = &m->cfg;
  if (p->micro_batches < 1 || p->batch % p->micro_batches != 0)
    return eng_err_set(e, ENG_EINVAL, "spec: micro_batches (%d) must divide batch (%d)",
                       p->micro_batches, p->batch);
  eng_exec_tiers tiers;
  int rc = eng_exec_tiers_of(c, p, &tiers, e);
  if (rc) return rc;
  char what[160];
  snprintf(what, sizeof what, "two layer slots, two gradient slots, the boundary buffers, the kept "
           "activations and one micro-batch of %d", p->batch / p->micro_batches);
  rc = eng_dev_reserve(dev, tiers.device, what, e);
  if (rc) return rc;

  eng_exec *x = calloc(1, sizeof *x);
  if (!x) return eng_err_set(e, ENG_ENOMEM, "cannot allocate the executor");
  x->m = m;
  x->dev = dev;
  x->p = *p;
  x->p.place = NULL; // resolved into x->place / x->keep: the caller's arrays need not outlive open
  x->p.keep = NULL;
  x->L = c->n_layers;
  x->mb = p->batch / p->micro_batches;
  x->place = calloc((size_t)x->L, sizeof *x->place);
  x->keep = calloc((size_t)x->L, sizeof *x->keep);
  x->ckpt = calloc((size_t)x->L, sizeof *x->ckpt);
  x->ckpt_host = calloc((size_t)x->L, sizeof *x->ckpt_host);
  x->rc = calloc((size_t)x->L + 1, sizeof *x->rc);
  x->version = calloc((size_t)m->lo.n_shards, sizeof *x->version);
  x->sumsq = calloc((size_t)m->lo.n_shards, sizeof *x->sumsq);
  x->opt_jobs = calloc(2 * (size_t)m->lo.n_shards, sizeof *x->opt_jobs);
  x->targets = malloc(sizeof(int32_t) * (size_t)p->batch * p->seq_len);
  x->kept = calloc((size_t)x->L * p->micro_batches, sizeof *x->kept);
  if (!x->place || !x->keep || !x->ckpt || !x->ckpt_host || !x->rc || !x->version || !x->sumsq ||
      !x->opt_jobs || !x->targets || !x->kept) {
    eng_exec_close(x);
    return eng_err_set(e, ENG_ENOMEM, "cannot allocate the executor's tables");
  }
  policy_resolve(c, p, x->place, x->keep, e); // accepted above
  for (int l = 0; l < x->L; l++) x->spills |= x->place[l] == ENG_PLACE_STORE;
  carve cv = {dev, 0};
  layout_arena(x, c, p, &cv);
  size_t acts = eng_layer_acts_floats(c, x->mb, p->seq_len);
  float *ab = x->acts_buf;
  int kept = 0;
  for (int l = 0; l < x->L; l++) kept += x->keep[l];
  if (kept < x->L || x->n_rc > 0) {
    eng_layer_acts_bind(&x->acts, ab, c, x->mb, p->seq_len);
    ab += acts;
  }
  for (int l = 0; l < x->L; l++)
    for (int i = 0; x->keep[l] && i < p->micro_batches; i++, ab += acts)
      eng_layer_acts_bind(&x->kept[(size_t)l * p->micro_batches + i], ab, c, x->mb, p->seq_len);
  eng_layer_scratch_bind(&x->scratch, x->scratch_buf, c, x->mb, p->seq_len);
  for (int l = 0; l < x->L; l++) {
    if (x->place[l] != ENG_PLACE_HOST) continue;
    if (posix_memalign((void **)&x->ckpt_host[l], 64, x->bnd_floats * sizeof(float))) {
      eng_exec_close(x);
      return eng_err_set(e, ENG_ENOMEM, "cannot allocate host checkpoints of %zu bytes",
                         x->bnd_floats * sizeof(float));
    }
  }
  pthread_mutex_init(&x->vmu, NULL);
  pthread_cond_init(&x->vcv, NULL);
  x->inline_opt = dev->host_compute && !p->opt_thread;
  if (eng_worker_start(&x->copy_in, 4) || eng_worker_start(&x->copy_out, 4) ||
      (!x->inline_opt && eng_worker_start(&x->optim, (uint32_t)m->lo.n_shards + 1))) {
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
  if (x->version) {
    pthread_mutex_destroy(&x->vmu);
    pthread_cond_destroy(&x->vcv);
  }
  if (x->ckpt_host)
    for (int l = 0; l < x->L; l++) free(x->ckpt_host[l]);
  free(x->ckpt_host);
  free(x->place);
  free(x->keep);
  free(x->ckpt);
  free(x->rc);
  free(x->version);
  free(x->sumsq);
  free(x->opt_jobs);
  free(x->kept);
  free(x->targets);
  free(x);
}

// ---- the step ------------------------------------------------------------------

// Rows of micro-batch i inside a full-batch boundary buffer.
static float *mbrow(const eng_exec *x, float *buf, int i) {
  return buf + (size_t)i * x->mb * x->p.seq_len * x->m->cfg.d_model;
}

static int cancelled(volatile int *cancel) { return cancel && *cancel; }

// Where layer l's micro-batch i keeps its activations.
static eng_layer_acts *acts_of(eng_exec *x, int l, int i) {
  return x->keep[l] ? &x->kept[(size_t)l * x->p.micro_batches + i] : &x->acts;
}

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

// Puts boundary l (input of layer l, whole batch) where the policy keeps it.
static int ckpt_store(eng_exec *x, int l, const float *src, eng_exec_result *res, eng_err *e) {
  size_t bytes = x->bnd_floats * sizeof(float);
  switch (x->place[l]) {
  case ENG_PLACE_DEVICE: memcpy(x->ckpt[l], src, bytes); return 0;
  case ENG_PLACE_HOST:
    x->dev->ops->copy_out(x->dev, x->ckpt_host[l], src, bytes);
    res->host_act += bytes;
    return 0;
  case ENG_PLACE_STORE: break;
  case ENG_PLACE_NONE: return 0;
  }
  atomic_fetch_add(&x->dev->bytes_out, bytes);
  res->store_act += bytes;
  return x->p.spill->act_put(x->p.spill->ctx, x->runs, l, 0, src, bytes, e);
}

static int ckpt_fetch(eng_exec *x, int l, const float **out, eng_err *e) {
  size_t bytes = x->bnd_floats * sizeof(float);
  *out = x->xc;
  switch (x->place[l]) {
  case ENG_PLACE_DEVICE: *out = x->ckpt[l]; return 0;
  case ENG_PLACE_HOST: x->dev->ops->copy_in(x->dev, x->xc, x->ckpt_host[l], bytes); return 0;
  case ENG_PLACE_STORE: break;
  case ENG_PLACE_NONE: return eng_err_set(e, ENG_ESTATE, "boundary %d was not kept", l); // a schedule bug
  }
  atomic_fetch_add(&x->dev->bytes_in, bytes);
  return x->p.spill->act_get(x->p.spill->ctx, x->runs, l, 0, x->xc, bytes, e);
}

// Waits for the step's pending copies before an early return.
static int abort_step(eng_exec *x, int rc, eng_err *e) {
  // Queued copies may wait on pending inline updates: apply them first.
  for (int s = 0; s < x->m->lo.n_shards; s++) shard_ensure(x, s);
  eng_worker_drain(&x->copy_in);
  eng_worker_drain(&x->copy_out);
  armed_finish(x, 0);
  x->n_sched = 0;
  if (rc == ENG_ECANCEL) eng_err_set(e, ENG_ECANCEL, "the run was cancelled");
  if (x->spills) {
    eng_err ignored;
    x->p.spill->act_drop(x->p.spill->ctx, x->runs, &ignored); // the step's spill is garbage now
  }
  return rc;
}

int eng_exec_run(eng_exec *x, const int32_t *ids, const int32_t *labels, int backward,
                 float *logits, volatile int *cancel, eng_exec_result *res, eng_err *e) {
  eng_model *m = x->m;
  const eng_config *c = &m->cfg;
  const eng_layout *lo = &m->lo;
  const int L = x->L, T = x->p.seq_len, B = x->p.batch, mb = x->mb, nmb = x->p.micro_batches;
  const int d = c->d_model, V = c->vocab, head = L + 1;
  const size_t mbn = (size_t)mb * T;
  memset(res, 0, sizeof *res);

  // Labels are aligned with ids (transformers): position t predicts labels[t+1].
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      int32_t y = t + 1 < T ? labels[(size_t)b * T + t + 1] : -1;
      x->targets[(size_t)b * T + t] = y < 0 ? -1 : y;
      res->count += y >= 0;
    }

  build_schedule(x, backward);
  if (backward) x->runs++;
  sched_begin(x);
  double t0 = now();

  // Embedding: a gather from the host table straight into the arena (on a
  // GPU it is a host gather plus one copy of B*T*d values, not the table).
  shard_ensure(x, 0);
  version_wait(x, 0, x->rounds);
  eng_k_embed_fwd(x->xa, m->shards[0].w, ids, B * T, d);
  atomic_fetch_add(&x->dev->bytes_in, x->bnd_floats * sizeof(float));

  float *cur = x->xa, *nxt = x->xb;
  for (int l = 0; l < L; l++) {
    if (cancelled(cancel)) return abort_step(x, ENG_ECANCEL, e);
    if (is_ckpt(x, l) && backward) {
      int rc = ckpt_store(x, l, cur, res, e);
      if (rc) return abort_step(x, rc, e);
    }
    const float *w = sched_acquire(x, l + 1, &res->t_wait);
    for (int i = 0; i < nmb; i++)
      eng_layer_fwd(c, lo, w, mbrow(x, cur, i), mbrow(x, nxt, i), mb, T, acts_of(x, l, i));
    sched_release(x);
    float *t = cur;
    cur = nxt;
    nxt = t;
  }
  double t1 = now();
  res->t_fwd = t1 - t0;

  // Loss fused with the head, micro-batch by micro-batch; dx of the last
  // boundary lands in nxt, which becomes dy of the backward.
  if (cancelled(cancel)) return abort_step(x, ENG_ECANCEL, e);
  const float *hw = sched_acquire(x, head, &res->t_wait);
  float *hg = NULL;
  if (backward) hg = gslot_begin(x, 0, lo->final_norm.numel + lo->embed.numel, &res->t_wait);
  const float *fnorm = hw, *wmat = hw + lo->final_norm.numel;
  float scale = res->count ? 1.0f / (float)res->count : 0.0f;
  for (int i = 0; i < nmb; i++) {
    const float *xl = mbrow(x, cur, i);
    eng_k_rmsnorm_fwd(x->h_xn, x->h_rstd, xl, fnorm, (int)mbn, d, c->rms_eps);
    float *lg = logits ? logits + (size_t)i * mbn * V : NULL;
    res->loss_sum += eng_k_head_loss(backward ? x->h_dxn : NULL, backward ? hg + lo->final_norm.numel : NULL,
                                     lg, x->h_xn, wmat, x->targets + (size_t)i * mbn, (int)mbn, d, V,
                                     scale, x->h_scratch);
    if (backward)
      eng_k_rmsnorm_bwd(mbrow(x, nxt, i), hg, x->h_dxn, xl, fnorm, x->h_rstd, (int)mbn, d, 0);
  }
  sched_release(x);
  double t2 = now();
  res->t_loss = t2 - t1;
  if (!backward) return 0;
  gslot_end(x, 0, head);

  // Backward, block by block from the end.
  float *dy = nxt, *dx = cur;
  int gi = 1;
  int e_ = L;
  while (e_ > 0) {
    int cb = e_ - 1;
    while (!is_ckpt(x, cb)) cb--;
    const float *xin0;
    int rc = ckpt_fetch(x, cb, &xin0, e);
    if (rc) return abort_step(x, rc, e);
    // Recompute the block's inner boundaries x_{cb+1} .. x_{e-1}.
    for (int l = cb; l <= e_ - 2; l++) {
      if (cancelled(cancel)) return abort_step(x, ENG_ECANCEL, e);
      const float *w = sched_acquire(x, l + 1, &res->t_wait);
      const float *in = l == cb ? xin0 : x->rc[l - cb - 1];
      for (int i = 0; i < nmb; i++)
        eng_layer_fwd(c, lo, w, mbrow(x, (float *)in, i), mbrow(x, x->rc[l - cb], i), mb, T, &x->acts);
      sched_release(x);
    }
    for (int l = e_ - 1; l >= cb; l--) {
      if (cancelled(cancel)) return abort_step(x, ENG_ECANCEL, e);
      const float *w = sched_acquire(x, l + 1, &res->t_wait);
      float *g = gslot_begin(x, gi, lo->layer_numel, &res->t_wait);
      const float *in = l == cb ? xin0 : x->rc[l - cb - 1];
      for (int i = 0; i < nmb; i++) {
        const float *xi = mbrow(x, (float *)in, i);
        eng_layer_acts *a = acts_of(x, l, i);
        if (!x->keep[l]) eng_layer_fwd(c, lo, w, xi, x->ybuf, mb, T, a); // recompute the layer's inside
        eng_layer_bwd(c, lo, w, g, xi, a, mbrow(x, dy, i), mbrow(x, dx, i), mb, T, &x->scratch);
      }
      sched_release(x);
      gslot_end(x, gi++, l + 1);
      float *t = dy;
      dy = dx;
      dx = t;
    }
    e_ = cb;
  }

  // Embedding backward: scatter dx of boundary 0 into the host table's
  // gradient. Tied, the head's copy-out wrote its first contribution there
  // (wait for it); untied, the store starts from zero.
  eng_worker_drain(&x->copy_out);
  atomic_fetch_add(&x->dev->bytes_out, x->bnd_floats * sizeof(float));
  if (lo->lm_head.numel) memset(m->shards[0].g, 0, m->shards[0].numel * sizeof(float)); // fp32 always
  eng_k_embed_bwd(m->shards[0].g, dy, ids, B * T, d);
  if (x->spills) {
    int rc = x->p.spill->act_drop(x->p.spill->ctx, x->runs, e);
    if (rc) return rc;
  }
  x->sumsq[0] = eng_k_sumsq(m->shards[0].g, m->shards[0].numel);
  armed_finish(x, 1);
  res->t_bwd = now() - t2;

  // Shard order, not completion order, so the sum is the same every run.
  for (int s = 0; s < lo->n_shards; s++) res->grad_sumsq += x->sumsq[s];
  return 0;
}
