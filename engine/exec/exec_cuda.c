// How the cuda backend computes the executor's step (exec_impl.h): the cuda
// kernels (kernels/cuda) on the GPU arena, with bf16 weights and activations
// and fp32 weight gradients that are finished on the device into what the
// host store holds, with their Σ g² (DESIGN §2).
//
// Ordering. Kernels queue on the compute stream; the compute thread never
// waits for them except where the host needs their results:
// - Weight slot k is refilled by a copy that waits, on the GPU, for wmark[k],
//   recorded when compute released the slot (slot_free); the compute thread
//   queues work on the slot only once that copy has returned (landed).
// - Gradient slot k: grad_finish queues the finished values and the shard's
//   Σ g² and records gmark[k]; the copy-out waits for that mark. The slot is
//   zeroed and finished again only after that copy has returned (exec.c's
//   gslot_begin waits for it).
// - Everything else that crosses (boundary 0, host and store checkpoints, dy
//   of boundary 0, the loss and the norms) goes through the backend's plain
//   copies, which wait for all compute queued before them.
// - end waits for the GPU once per run, which surfaces the errors of kernels
//   and copies (eng_dev_cuda_sync).
// The sizes (eng_exec_cuda_sizes and the own region's layout) are built in
// every build, so that the planner sizes a GPU's arena anywhere; the rest
// only with CUDA.
#include <stdlib.h>
#include <string.h>

#include "exec/exec_impl.h"
#include "kernels/cuda/kernels_cuda.h"

// The backend's own device buffers, one region after the shared ones.
typedef struct cuda_own {
  eng_bf16 *gout[2];  // finished bf16 gradients of each slot (a bf16 store only)
  void *fin_scratch;  // eng_cuda_grad_finish's partials
  double *sumsq;      // [n_shards] Σ g² of each finished shard
  double *loss;       // Σ cross-entropy of the run
  int32_t *targets;   // [B*T] the run's targets
  int32_t *pos;       // [B*T] the run's position ids, when it has them
} cuda_own;

// One function both sizes (base NULL) and binds the own region; every
// buffer starts 256-byte aligned, as the kernels want.
static size_t own_layout(cuda_own *o, char *base, const eng_config *c, const eng_exec_policy *p) {
  eng_layout lo;
  eng_layout_init(&lo, c);
  const size_t slot = exec_slot_values(&lo);
  eng_cuda_carve cv = {base, 0};
  for (int i = 0; i < 2; i++) o->gout[i] = p->grad_bf16 ? eng_cuda_carve_take(&cv, slot * sizeof(eng_bf16)) : NULL;
  o->fin_scratch = eng_cuda_carve_take(&cv, eng_cuda_grad_finish_scratch_bytes(slot));
  o->sumsq = eng_cuda_carve_take(&cv, (size_t)lo.n_shards * sizeof(double));
  o->loss = eng_cuda_carve_take(&cv, sizeof(double));
  o->targets = eng_cuda_carve_take(&cv, (size_t)p->batch * p->seq_len * sizeof(int32_t));
  o->pos = eng_cuda_carve_take(&cv, (size_t)p->batch * p->seq_len * sizeof(int32_t));
  return cv.off;
}

int eng_exec_cuda_sizes(const eng_config *c, const eng_exec_policy *p, exec_sizes *z, eng_err *e) {
  int rc = eng_cuda_check_layout(c, e); // the kernels' own check comes at open
  if (rc) return rc;
  const int mb = p->batch / p->micro_batches, T = p->seq_len;
  cuda_own sizing;
  *z = (exec_sizes){.align = 256,
                    .weight = sizeof(eng_bf16),
                    .act = sizeof(eng_bf16),
                    .acts = eng_cuda_layer_acts_bytes(c, mb, T),
                    .scratch = eng_cuda_layer_scratch_bytes(c, mb, T),
                    .head_scratch = eng_cuda_head_loss_scratch_bytes(c->vocab),
                    .own = own_layout(&sizing, NULL, c, p)};
  return 0;
}

#ifdef TRAIND_HAVE_CUDA

#include "backend/cuda.h"
#include "common/bf16.h"
#include "kernels/kernels.h"

// Rows of dy of boundary 0 widened to fp32 at a time for the embedding's
// host backward (about 1 MiB).
#define EMBED_CHUNK_FLOATS ((size_t)1 << 18)

typedef struct cuda_state {
  eng_cuda_ctx *cx;
  eng_cuda_stream st;            // the compute stream (cx's)
  eng_cuda_layer_acts *acts;     // by exec_acts_index, bound where x->acts_at says
  eng_cuda_layer_scratch scratch;
  cuda_own own;
  eng_cuda_mark wmark[2], gmark[2];
  float *rows;                   // host: EMBED_CHUNK_FLOATS
  int pinned;                    // host regions page-locked so far (pin_region order)
  eng_err err;                   // first error of a call that cannot return one (slot marks)
} cuda_state;

// Host region k of the model that crosses PCIe: shard k/2's working copy
// (even k) or gradient store (odd k).
static void pin_region(const eng_model *m, int k, void **p, size_t *bytes) {
  const eng_shard *sh = &m->shards[k / 2];
  if (k % 2 == 0) *p = sh->work, *bytes = sh->numel * sizeof(uint16_t);
  else *p = sh->g, *bytes = sh->g_numel * (sh->g_bf16 ? sizeof(uint16_t) : sizeof(float));
}

static int cuda_open(eng_exec *x, eng_err *e) {
  const eng_config *c = &x->m->cfg;
  const int head = x->L + 1;
  int rc = eng_cuda_check_config(c, e);
  if (rc) return rc;
  if (!x->p.grad_bf16 != !x->m->shards[head].g_bf16)
    return eng_err_set(e, ENG_EINVAL, "policy: grad_bf16 is %d but the model's gradient store is %s",
                       x->p.grad_bf16, x->m->shards[head].g_bf16 ? "bf16" : "fp32");
  const size_t n_acts = 1 + (size_t)x->L * x->p.micro_batches;
  cuda_state *s = calloc(1, sizeof *s);
  if (s) s->acts = calloc(n_acts, sizeof *s->acts);
  if (s) s->rows = malloc(EMBED_CHUNK_FLOATS * sizeof(float));
  if (!s || !s->acts || !s->rows) {
    if (s) {
      free(s->acts);
      free(s->rows);
    }
    free(s);
    return eng_err_set(e, ENG_ENOMEM, "cannot allocate the cuda executor's tables");
  }
  x->be = s;
  if ((rc = eng_dev_cuda_use(x->dev, e))) return rc;
  s->cx = eng_dev_cuda_ctx(x->dev);
  s->st = eng_cuda_ctx_stream(s->cx);
  for (size_t k = 0; k < n_acts; k++)
    if (x->acts_at[k]) eng_cuda_layer_acts_bind(&s->acts[k], x->acts_at[k], c, x->mb, x->p.seq_len);
  eng_cuda_layer_scratch_bind(&s->scratch, x->scratch_buf, c, x->mb, x->p.seq_len);
  own_layout(&s->own, x->own, c, &x->p);
  for (int i = 0; i < 2 && !rc; i++) {
    rc = eng_dev_cuda_mark_init(x->dev, &s->wmark[i], e);
    if (!rc) rc = eng_dev_cuda_mark_init(x->dev, &s->gmark[i], e);
  }
  if (!rc && (rc = eng_dev_cuda_host_alloc(x->dev, &x->stage, x->bnd_bytes, e)))
    eng_err_prefix(e, "the pinned staging of one boundary: ");
  // What crosses PCIe on every step is page-locked, so it moves by DMA
  // without the backend's staging copies (never the fp32 master or the
  // optimizer state, DESIGN §2).
  for (int k = 0; !rc && k < 2 * x->m->lo.n_shards; k++) {
    void *p;
    size_t bytes;
    pin_region(x->m, k, &p, &bytes);
    if ((rc = eng_dev_cuda_pin(x->dev, p, bytes, e))) eng_err_prefix(e, "page-locking shard %d: ", k / 2);
    else s->pinned++;
  }
  return rc;
}

static void cuda_close(eng_exec *x) {
  cuda_state *s = x->be;
  if (!s) return;
  eng_err ignored;
  eng_dev_cuda_sync(x->dev, &ignored); // nothing in flight may touch what is released below
  for (int k = 0; k < s->pinned; k++) {
    void *p;
    size_t bytes;
    pin_region(x->m, k, &p, &bytes);
    eng_dev_cuda_unpin(x->dev, p);
  }
  for (int i = 0; i < 2; i++) eng_dev_cuda_mark_free(&s->wmark[i]), eng_dev_cuda_mark_free(&s->gmark[i]);
  if (x->stage) eng_dev_cuda_host_free(x->stage);
  x->stage = NULL;
  free(s->acts);
  free(s->rows);
  free(s);
  x->be = NULL;
}

static int cuda_host_alloc(eng_exec *x, void **p, size_t bytes, eng_err *e) {
  return eng_dev_cuda_host_alloc(x->dev, p, bytes, e);
}

// ---- streams -----------------------------------------------------------------

static void keep_error(cuda_state *s, const eng_err *e) {
  if (s->err.code == ENG_OK) s->err = *e;
}

static void cuda_weights_in(eng_exec *x, int slot, void *dst, const void *src, size_t n) {
  cuda_state *s = x->be;
  eng_dev_cuda_copy_in_after(x->dev, &s->wmark[slot], dst, src, n * sizeof(eng_bf16)); // the working copy
}

static void cuda_slot_free(eng_exec *x, int slot) {
  cuda_state *s = x->be;
  eng_err e = {0};
  if (eng_dev_cuda_mark(x->dev, &s->wmark[slot], &e)) keep_error(s, &e);
}

static void cuda_grad_out(eng_exec *x, int slot, int shard) {
  cuda_state *s = x->be;
  eng_model *m = x->m;
  const eng_layout *lo = &m->lo;
  const eng_cuda_mark *mk = &s->gmark[slot];
  eng_shard *sh = &m->shards[shard];
  // What grad_finish left: bf16 values, or (an fp32 store) the accumulator itself.
  const char *src = sh->g_bf16 ? (const char *)s->own.gout[slot] : (const char *)x->gslot[slot];
  const size_t vz = sh->g_bf16 ? sizeof(uint16_t) : sizeof(float);
  char *dst = sh->g;
  if (shard != lo->n_layers + 1) {
    eng_dev_cuda_copy_out_after(x->dev, mk, dst, src, sh->numel * vz);
    return;
  }
  eng_dev_cuda_copy_out_after(x->dev, mk, dst + lo->final_norm.off * vz, src, lo->final_norm.numel * vz);
  if (lo->lm_head.numel)
    eng_dev_cuda_copy_out_after(x->dev, mk, dst + lo->lm_head.off * vz, src + lo->final_norm.numel * vz,
                                lo->lm_head.numel * vz);
  else // tied: the head's gradient is the first contribution to the embedding's (fp32, as accumulated)
    eng_dev_cuda_copy_out_after(x->dev, mk, m->shards[0].g, x->gslot[slot] + lo->final_norm.numel,
                                lo->embed.numel * sizeof(float));
}

// ---- the step ------------------------------------------------------------------

// Boundary 0: rows of the embedding's bf16 working copy, gathered on the
// host, cross as B*T*d values (the table never does); then the targets and
// the position ids.
static int cuda_begin(eng_exec *x, const int32_t *ids, eng_err *e) {
  cuda_state *s = x->be;
  const int n = x->p.batch * x->p.seq_len;
  const size_t d = (size_t)x->m->cfg.d_model;
  int rc = eng_dev_cuda_use(x->dev, e);
  if (rc) return rc;
  const uint16_t *table = x->m->shards[0].work;
  uint16_t *rows = x->stage;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < n; i++) memcpy(rows + (size_t)i * d, table + (size_t)ids[i] * d, d * sizeof(uint16_t));
  x->dev->ops->copy_in(x->dev, x->xa, rows, x->bnd_bytes);
  x->dev->ops->copy_in(x->dev, s->own.targets, x->targets, (size_t)n * sizeof(int32_t));
  if (x->pos) x->dev->ops->copy_in(x->dev, s->own.pos, x->pos, (size_t)n * sizeof(int32_t));
  return eng_cuda_zero(s->own.loss, sizeof(double), s->st, e);
}

static int cuda_copy(eng_exec *x, void *dst, const void *src, size_t bytes, eng_err *e) {
  cuda_state *s = x->be;
  return eng_cuda_copy(dst, src, bytes, s->st, e);
}

// Micro-batch i's rows of the position ids on the device (NULL: the run has none).
static const int32_t *mb_pos(const eng_exec *x, int i) {
  const cuda_state *s = x->be;
  return x->pos ? s->own.pos + (size_t)i * x->mb * x->p.seq_len : NULL;
}

static int cuda_layer_fwd(eng_exec *x, int layer, const void *w, const void *in, void *out, int i, int acts,
                          eng_err *e) {
  (void)layer;
  cuda_state *s = x->be;
  return eng_cuda_layer_fwd(s->cx, &x->m->cfg, &x->m->lo, w, in, out, mb_pos(x, i), x->mb, x->p.seq_len,
                            &s->acts[acts], e);
}

static int cuda_layer_bwd(eng_exec *x, int layer, const void *w, float *g, const void *in, int i, int acts,
                          const void *dy, void *dx, eng_err *e) {
  (void)layer;
  cuda_state *s = x->be;
  return eng_cuda_layer_bwd(s->cx, &x->m->cfg, &x->m->lo, w, g, in, &s->acts[acts], dy, dx, mb_pos(x, i), x->mb,
                            x->p.seq_len, &s->scratch, e);
}

// The loss stays on the device (own.loss) until end; logits were refused
// when the run started (exec_ops.logits is 0).
static int cuda_head(eng_exec *x, const void *w, float *g, const void *xl, void *dx, int i, float *logits,
                     float scale, double *loss_sum, eng_err *e) {
  (void)logits, (void)loss_sum;
  cuda_state *s = x->be;
  const eng_config *c = &x->m->cfg;
  const eng_layout *lo = &x->m->lo;
  const int d = c->d_model, V = c->vocab, mbn = x->mb * x->p.seq_len;
  const eng_bf16 *fnorm = w, *wmat = fnorm + lo->final_norm.numel;
  int rc = eng_cuda_rmsnorm_fwd(x->h_xn, x->h_rstd, xl, fnorm, mbn, d, c->rms_eps, s->st, e);
  if (!rc)
    rc = eng_cuda_head_loss(s->cx, g ? x->h_dxn : NULL, g ? g + lo->final_norm.numel : NULL, NULL, s->own.loss,
                            x->h_xn, wmat, s->own.targets + (size_t)i * mbn, mbn, d, V, scale, x->h_scratch, e);
  if (!rc && g) rc = eng_cuda_rmsnorm_bwd(s->cx, dx, g, x->h_dxn, xl, fnorm, x->h_rstd, mbn, d, 0, e);
  return rc;
}

static int cuda_grad_zero(eng_exec *x, int slot, size_t floats, eng_err *e) {
  cuda_state *s = x->be;
  return eng_cuda_zero(x->gslot[slot], floats * sizeof(float), s->st, e);
}

// The shard's values as the store holds them and their Σ g² into own.sumsq.
// The head stage finishes the final norm and lm_head; tied, the matrix's
// gradient goes on to the embedding's (fp32) as accumulated, and counts in
// the embedding's norm.
static int cuda_grad_finish(eng_exec *x, int slot, int shard, eng_err *e) {
  cuda_state *s = x->be;
  const eng_layout *lo = &x->m->lo;
  size_t n = shard == lo->n_layers + 1 ? lo->final_norm.numel + lo->lm_head.numel : eng_layout_shard_numel(lo, shard);
  int rc = eng_cuda_grad_finish(s->own.gout[slot], s->own.sumsq + shard, x->gslot[slot], n, s->own.fin_scratch,
                                s->st, e);
  return rc ? rc : eng_dev_cuda_mark(x->dev, &s->gmark[slot], e);
}

// dy of boundary 0 crosses once (a failed copy surfaces in end); the host
// scatters it into the embedding's fp32 gradient in row order, a chunk at a
// time (the same sums as one call).
static int cuda_embed_bwd(eng_exec *x, const void *dy, const int32_t *ids, eng_err *e) {
  cuda_state *s = x->be;
  const size_t n = (size_t)x->p.batch * x->p.seq_len, d = (size_t)x->m->cfg.d_model;
  const size_t chunk = EMBED_CHUNK_FLOATS / d ? EMBED_CHUNK_FLOATS / d : 1;
  x->dev->ops->copy_out(x->dev, x->stage, dy, x->bnd_bytes);
  const uint16_t *rows = x->stage;
  for (size_t r0 = 0; r0 < n; r0 += chunk) {
    size_t nr = n - r0 < chunk ? n - r0 : chunk;
    eng_bf16_to_f32_n(s->rows, rows + r0 * d, nr * d, ENG_ISA_AUTO);
    int rc = eng_model_embed_grad_add(x->m, s->rows, ids + r0, (int)nr, 0, e);
    if (rc) return rc;
  }
  return 0;
}

// The loss and the shards' norms come back with plain copies (after all the
// queued compute); then the GPU's and the copies' errors, once per run.
static int cuda_end(eng_exec *x, eng_exec_result *res, int backward, eng_err *e) {
  cuda_state *s = x->be;
  x->dev->ops->copy_out(x->dev, &res->loss_sum, s->own.loss, sizeof(double));
  if (backward)
    x->dev->ops->copy_out(x->dev, x->sumsq + 1, s->own.sumsq + 1, (size_t)(x->L + 1) * sizeof(double));
  int rc = eng_dev_cuda_sync(x->dev, e);
  if (!rc && s->err.code != ENG_OK) {
    rc = s->err.code;
    if (e) *e = s->err;
  }
  s->err.code = ENG_OK;
  return rc;
}

static void cuda_abort(eng_exec *x) {
  cuda_state *s = x->be;
  eng_err ignored;
  eng_dev_cuda_sync(x->dev, &ignored); // the failure is reported already
  s->err.code = ENG_OK;
}

const exec_ops eng_exec_cuda_ops = {
    .logits = 0,
    .open = cuda_open,
    .close = cuda_close,
    .host_alloc = cuda_host_alloc,
    .host_free = eng_dev_cuda_host_free,
    .weights_in = cuda_weights_in,
    .slot_free = cuda_slot_free,
    .grad_out = cuda_grad_out,
    .begin = cuda_begin,
    .copy = cuda_copy,
    .layer_fwd = cuda_layer_fwd,
    .layer_bwd = cuda_layer_bwd,
    .head = cuda_head,
    .grad_zero = cuda_grad_zero,
    .grad_finish = cuda_grad_finish,
    .embed_bwd = cuda_embed_bwd,
    .end = cuda_end,
    .abort = cuda_abort,
};

#endif
