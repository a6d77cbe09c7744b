// How the cpu backend computes the executor's step (exec_impl.h): the fp32
// kernels of kernels/cpu on the host arena. The arena is host memory, so a
// copy inside it is memcpy, the store and the embedding's backward read it in
// place, and a gradient slot narrows to the store's dtype as it is copied out.
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/bf16.h"
#include "common/clock.h"
#include "exec/exec_impl.h"
#include "exec/layer.h"
#include "exec/layer_dn.h"
#include "kernels/kernels.h"

// POET-X's buffers in the arena's own region (exec_sizes.own): the
// rotations of the two layers used last (the forward, a block's recompute
// and its backward alternate between neighbours), dL/dR of the layer in its
// backward, the chains' work for one micro-batch and the Cayley maps' work.
typedef struct poet_bufs {
  float *rot[2];
  int rot_layer[2];          // -1: empty
  int64_t rot_round[2];      // the update round whose θ they hold
  int next;                  // the entry to refill next
  float *drot;
  int drot_layer;            // the layer whose backward drot holds (-1: none)
  float *work, *cwork;
  double *sumsq;             // [shards] Σ dθ², for grad_out
} poet_bufs;

typedef struct cpu_state {
  eng_layer_acts *acts;      // by exec_acts_index, bound where x->acts_at says
  eng_layer_scratch scratch;
  eng_dn_acts *dn_acts;      // a hybrid's Gated DeltaNet layers: the same buffers seen as theirs
  eng_dn_scratch dn_scratch;
  float *fnorm1;             // zero-centred norms: 1 + the final norm's weight [d]
  poet_bufs poet;
} cpu_state;

// Floats of poet_bufs' arena part for config c (0 without POET-X).
static size_t poet_own_floats(const eng_config *c, const eng_exec_policy *p, size_t *rot, size_t *work, eng_err *e,
                              int *rc) {
  *rc = 0;
  if (!p->poet_block) return 0;
  eng_layout lo;
  eng_layout_init(&lo, c);
  eng_poet_model pm;
  if ((*rc = eng_poet_model_shape(&pm, &lo, p->poet_block, e))) return 0;
  const int n = p->batch / p->micro_batches * p->seq_len;
  *rot = eng_poet_model_rot_floats(&pm);
  *work = eng_poet_layer_work(c->d_model, c->d_ff, c->n_heads * c->head_dim, c->n_kv_heads * c->head_dim,
                              p->poet_block, n);
  return 3 * *rot + *work + eng_poet_model_grad_floats(p->poet_block);
}

int eng_exec_cpu_sizes(const eng_config *c, const eng_exec_policy *p, exec_sizes *z, eng_err *e) {
  const int mb = p->batch / p->micro_batches, T = p->seq_len;
  size_t rot, work;
  int rc;
  size_t own = poet_own_floats(c, p, &rot, &work, e, &rc);
  if (rc) return rc;
  size_t acts = eng_layer_acts_floats(c, mb, T) + (p->poet_block && p->poet_fast ? eng_layer_acts_z_floats(c, mb, T) : 0);
  size_t scratch = eng_layer_scratch_floats(c, mb, T);
  if (c->full_every) { // a buffer serves either kind of layer
    if (eng_dn_acts_floats(c, mb, T) > acts) acts = eng_dn_acts_floats(c, mb, T);
    if (eng_dn_scratch_floats(c, mb, T) > scratch) scratch = eng_dn_scratch_floats(c, mb, T);
  }
  *z = (exec_sizes){.align = 64,
                    .weight = sizeof(float),
                    .act = sizeof(float),
                    .acts = acts * sizeof(float),
                    .scratch = scratch * sizeof(float),
                    .head_scratch = eng_k_head_loss_scratch_floats(c->vocab) * sizeof(float),
                    .own = own * sizeof(float)};
  return 0;
}

// Layer l's POET-X view, its rotations current for this round's θ.
static void poet_view(eng_exec *x, int l, int backward, eng_poet_layer *out) {
  poet_bufs *pb = &((cpu_state *)x->be)->poet;
  const eng_poet_model *pm = &x->m->poet;
  int k = pb->rot_layer[0] == l && pb->rot_round[0] == x->rounds   ? 0
          : pb->rot_layer[1] == l && pb->rot_round[1] == x->rounds ? 1
                                                                   : -1;
  if (k < 0) {
    k = pb->next;
    pb->next ^= 1;
    eng_poet_model_rotations(pm, l, pb->rot[k], pb->cwork);
    pb->rot_layer[k] = l;
    pb->rot_round[k] = x->rounds;
  }
  if (backward && pb->drot_layer != l) { // the layer's first micro-batch
    memset(pb->drot, 0, eng_poet_model_rot_floats(pm) * sizeof(float));
    pb->drot_layer = l;
  }
  eng_poet_model_layer(pm, l, pb->rot[k], backward ? pb->drot : NULL, pb->work, out);
}

static int cpu_open(eng_exec *x, eng_err *e) {
  const eng_config *c = &x->m->cfg;
  const size_t n_acts = 1 + (size_t)x->L * x->p.micro_batches;
  cpu_state *s = calloc(1, sizeof *s);
  if (s) s->acts = calloc(n_acts, sizeof *s->acts);
  if (s && c->full_every) s->dn_acts = calloc(n_acts, sizeof *s->dn_acts);
  if (s && c->norm_plus_one) s->fnorm1 = malloc((size_t)c->d_model * sizeof(float));
  if (!s || !s->acts || (c->full_every && !s->dn_acts) || (c->norm_plus_one && !s->fnorm1)) {
    if (s) free(s->acts), free(s->dn_acts), free(s->fnorm1);
    free(s);
    return eng_err_set(e, ENG_ENOMEM, "cannot allocate the executor's activation table");
  }
  x->be = s;
  for (size_t k = 0; c->full_every && k < n_acts; k++)
    if (x->acts_at[k]) eng_dn_acts_bind(&s->dn_acts[k], x->acts_at[k], c, x->mb, x->p.seq_len);
  if (c->full_every) eng_dn_scratch_bind(&s->dn_scratch, x->scratch_buf, c, x->mb, x->p.seq_len);
  for (size_t k = 0; k < n_acts; k++)
    if (x->acts_at[k]) {
      eng_layer_acts_bind(&s->acts[k], x->acts_at[k], c, x->mb, x->p.seq_len);
      if (x->p.poet_block && x->p.poet_fast)
        s->acts[k].z = (float *)x->acts_at[k] + eng_layer_acts_floats(c, x->mb, x->p.seq_len);
    }
  eng_layer_scratch_bind(&s->scratch, x->scratch_buf, c, x->mb, x->p.seq_len);
  if (x->p.poet_block) {
    size_t rot, work;
    int rc;
    poet_own_floats(c, &x->p, &rot, &work, e, &rc);
    if (rc) return rc;
    poet_bufs *pb = &s->poet;
    float *f = x->own;
    pb->rot[0] = f, pb->rot[1] = f + rot, pb->drot = f + 2 * rot, pb->work = f + 3 * rot, pb->cwork = pb->work + work;
    pb->rot_layer[0] = pb->rot_layer[1] = pb->drot_layer = -1;
    if (!(pb->sumsq = calloc((size_t)x->m->lo.n_shards, sizeof *pb->sumsq)))
      return eng_err_set(e, ENG_ENOMEM, "cannot allocate the executor's POET-X sums");
  }
  return 0;
}

static void cpu_close(eng_exec *x) {
  cpu_state *s = x->be;
  if (s) free(s->acts), free(s->dn_acts), free(s->fnorm1), free(s->poet.sumsq);
  free(s);
  x->be = NULL;
}

static int cpu_host_alloc(eng_exec *x, void **p, size_t bytes, eng_err *e) {
  (void)x;
  *p = NULL;
  if (posix_memalign(p, 64, bytes ? bytes : 64))
    return eng_err_set(e, ENG_ENOMEM, "cannot allocate %zu bytes of host memory", bytes);
  return 0;
}

static void cpu_weights_in(eng_exec *x, int slot, void *dst, const void *src, size_t n) {
  (void)slot;
  if (!x->m->shards[0].work) {
    x->dev->ops->copy_in(x->dev, dst, src, n * sizeof(float));
    return;
  }
  // A bf16 working copy (eng_spec.work_bf16): only bf16 crosses, widened
  // into the slot (on the cpu, the conversion is the copy).
  double t0 = eng_now();
  eng_bf16_to_f32_here(dst, src, n);
  eng_dev_cpu_moved_in(x->dev, n * sizeof(uint16_t), t0);
}

// Compute is synchronous: a released slot is free at once.
static void cpu_slot_free(eng_exec *x, int slot) { (void)x, (void)slot; }

// Writes n gradient values of the slot into a shard's store at element off.
static void grad_store(eng_exec *x, eng_shard *sh, size_t off, const float *src, size_t n) {
  if (sh->g_bf16) {
    // The device narrows; only bf16 crosses (on the cpu, the conversion is the copy).
    double t0 = eng_now();
    eng_bf16_from_f32_n((uint16_t *)sh->g + off, src, n, ENG_ISA_AUTO);
    eng_dev_cpu_moved_out(x->dev, n * sizeof(uint16_t), t0);
  } else {
    x->dev->ops->copy_out(x->dev, (float *)sh->g + off, src, n * sizeof(float));
  }
}

static void cpu_grad_out(eng_exec *x, int slot, int shard) {
  eng_model *m = x->m;
  const eng_layout *lo = &m->lo;
  const int head = lo->n_layers + 1;
  const float *src = x->gslot[slot];
  size_t n;
  if (shard == head) {
    eng_shard *hs = &m->shards[head];
    grad_store(x, hs, lo->final_norm.off, src, lo->final_norm.numel);
    // Tied: the head's gradient is the first contribution to the embedding's.
    if (lo->lm_head.numel) grad_store(x, hs, lo->lm_head.off, src + lo->final_norm.numel, lo->embed.numel);
    else grad_store(x, &m->shards[0], 0, src + lo->final_norm.numel, lo->embed.numel);
    n = lo->final_norm.numel + lo->lm_head.numel;
  } else {
    eng_shard *sh = &m->shards[shard];
    n = sh->numel;
    if (sh->g_numel == n) {
      grad_store(x, sh, 0, src, n);
    } else { // POET-X: only the tensors that train have a store
      for (int i = 0; i < sh->n_tensors; i++)
        if (sh->g_off[i] != SIZE_MAX) grad_store(x, sh, sh->g_off[i], src + sh->tensors[i].off, sh->tensors[i].numel);
    }
  }
  // The norm of what the device accumulated (fp32), as a GPU reduces it on the fly;
  // under POET-X a layer's θ gradients, finished by grad_finish, count too.
  const poet_bufs *pb = &((cpu_state *)x->be)->poet;
  x->sumsq[shard] = eng_k_sumsq(src, n) + (pb->sumsq && shard != head ? pb->sumsq[shard] : 0.0);
}

// A gather from the host table straight into the arena.
static int cpu_begin(eng_exec *x, const int32_t *ids, eng_err *e) {
  (void)e;
  ((cpu_state *)x->be)->poet.drot_layer = -1; // nothing carries over from a step that failed
  const eng_shard *sh = &x->m->shards[0];
  if (sh->work) eng_k_embed_fwd_bf16(x->xa, sh->work, ids, x->p.batch * x->p.seq_len, x->m->cfg.d_model);
  else eng_k_embed_fwd(x->xa, sh->w, ids, x->p.batch * x->p.seq_len, x->m->cfg.d_model);
  atomic_fetch_add(&x->dev->bytes_in, x->bnd_bytes);
  return 0;
}

static int cpu_copy(eng_exec *x, void *dst, const void *src, size_t bytes, eng_err *e) {
  (void)x, (void)e;
  memcpy(dst, src, bytes);
  return 0;
}

// Micro-batch i's rows of the run's position ids (NULL: none given).
static const int32_t *mb_pos(const eng_exec *x, int i) {
  return x->pos ? x->pos + (size_t)i * x->mb * x->p.seq_len : NULL;
}

static int cpu_layer_fwd(eng_exec *x, int layer, const void *w, const void *in, void *out, int i, int acts,
                         eng_err *e) {
  (void)e;
  cpu_state *s = x->be;
  const eng_layout *lo = &x->m->lo;
  if (eng_layout_kind(lo, layer) == ENG_KIND_DN) {
    eng_dn_layer_fwd(&x->m->cfg, lo->dn_proto, w, in, out, mb_pos(x, i), x->mb, x->p.seq_len, &s->dn_acts[acts]);
    return 0;
  }
  eng_poet_layer pl;
  if (x->p.poet_block) poet_view(x, layer, 0, &pl);
  eng_layer_fwd(&x->m->cfg, &x->m->lo, w, in, out, mb_pos(x, i), x->mb, x->p.seq_len, &s->acts[acts],
                x->p.poet_block ? &pl : NULL);
  return 0;
}

static int cpu_layer_bwd(eng_exec *x, int layer, const void *w, float *g, const void *in, int i, int acts,
                         const void *dy, void *dx, eng_err *e) {
  (void)e;
  cpu_state *s = x->be;
  const eng_layout *lo = &x->m->lo;
  if (eng_layout_kind(lo, layer) == ENG_KIND_DN) {
    eng_dn_layer_bwd(&x->m->cfg, lo->dn_proto, w, g, in, &s->dn_acts[acts], dy, dx, mb_pos(x, i), x->mb,
                     x->p.seq_len, &s->dn_scratch);
    return 0;
  }
  eng_poet_layer pl;
  if (x->p.poet_block) poet_view(x, layer, 1, &pl);
  eng_layer_bwd(&x->m->cfg, &x->m->lo, w, g, in, &s->acts[acts], dy, dx, mb_pos(x, i), x->mb, x->p.seq_len,
                &s->scratch, x->p.poet_block ? &pl : NULL);
  return 0;
}

static int cpu_head(eng_exec *x, const void *w, float *g, const void *xl, void *dx, int i, float *logits,
                    float scale, double *loss_sum, eng_err *e) {
  (void)e;
  const eng_config *c = &x->m->cfg;
  const eng_layout *lo = &x->m->lo;
  const int d = c->d_model, V = c->vocab, mbn = x->mb * x->p.seq_len;
  const float *fnorm = w, *wmat = fnorm + lo->final_norm.numel;
  if (c->norm_plus_one) { // x̂·(1 + w), the same bits as the plain norm given 1 + w
    cpu_state *s = x->be;
    for (int j = 0; j < d; j++) s->fnorm1[j] = 1.0f + fnorm[j];
    fnorm = s->fnorm1;
  }
  eng_k_rmsnorm_fwd(x->h_xn, x->h_rstd, xl, fnorm, mbn, d, c->rms_eps);
  float *lg = logits ? logits + (size_t)i * mbn * V : NULL;
  if (x->seq_loss && !g && !lg) { // scoring: sequence by sequence
    const int T = x->p.seq_len;
    for (int b = 0; b < x->mb; b++) {
      double l = eng_k_head_loss(NULL, NULL, NULL, (const float *)x->h_xn + (size_t)b * T * d, wmat,
                                 x->targets + (size_t)i * mbn + (size_t)b * T, T, d, V, scale, x->h_scratch);
      x->seq_loss[(size_t)i * x->mb + b] = l;
      *loss_sum += l;
    }
    return 0;
  }
  *loss_sum += eng_k_head_loss(g ? x->h_dxn : NULL, g ? g + lo->final_norm.numel : NULL, lg, x->h_xn, wmat,
                               x->targets + (size_t)i * mbn, mbn, d, V, scale, x->h_scratch);
  if (g) eng_k_rmsnorm_bwd(dx, g, x->h_dxn, NULL, xl, fnorm, x->h_rstd, mbn, d);
  return 0;
}

static int cpu_grad_zero(eng_exec *x, int slot, size_t floats, eng_err *e) {
  (void)e;
  memset(x->gslot[slot], 0, floats * sizeof(float));
  return 0;
}

// The copy-out narrows (grad_store): nothing to do before it, but under
// POET-X a layer's θ gradients from the dL/dR its backward summed.
static int cpu_grad_finish(eng_exec *x, int slot, int shard, eng_err *e) {
  (void)slot, (void)e;
  poet_bufs *pb = &((cpu_state *)x->be)->poet;
  if (!x->p.poet_block || shard < 1 || shard > x->m->lo.n_layers) return 0;
  pb->sumsq[shard] = eng_poet_model_grad(&x->m->poet, shard - 1, pb->drot, pb->cwork);
  pb->drot_layer = -1;
  return 0;
}

// Micro-batch by micro-batch, each one's sums added as a whole: a
// data-parallel rank computing some of the micro-batches adds the same bits
// (dist_run.c).
static int cpu_embed_bwd(eng_exec *x, const void *dy, const int32_t *ids, eng_err *e) {
  atomic_fetch_add(&x->dev->bytes_out, x->bnd_bytes);
  return eng_model_embed_grad_add(x->m, dy, ids, x->p.batch * x->p.seq_len, x->mb * x->p.seq_len, e);
}

// Everything ran where it was called: results are in place, nothing to wait for.
static int cpu_end(eng_exec *x, eng_exec_result *res, int backward, eng_err *e) {
  (void)x, (void)res, (void)backward, (void)e;
  return 0;
}

static void cpu_abort(eng_exec *x) { (void)x; }

const exec_ops eng_exec_cpu_ops = {
    .logits = 1,
    .open = cpu_open,
    .close = cpu_close,
    .host_alloc = cpu_host_alloc,
    .host_free = free,
    .weights_in = cpu_weights_in,
    .slot_free = cpu_slot_free,
    .grad_out = cpu_grad_out,
    .begin = cpu_begin,
    .copy = cpu_copy,
    .layer_fwd = cpu_layer_fwd,
    .layer_bwd = cpu_layer_bwd,
    .head = cpu_head,
    .grad_zero = cpu_grad_zero,
    .grad_finish = cpu_grad_finish,
    .embed_bwd = cpu_embed_bwd,
    .end = cpu_end,
    .abort = cpu_abort,
};
