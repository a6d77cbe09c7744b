// Data parallelism in the engine's run (issue 19, DESIGN §10): every rank
// reads the whole global batch from the same data stream and computes its
// share, rows [rank·B/W, (rank+1)·B/W), as micro-batches M/W of the global
// split. The loss is averaged over the global batch's tokens (the executor
// is told their count), so the ranks' gradients sum to the whole batch's.
// After the backward every shard's gradient is summed over the ranks in rank
// order (dist/coll.h) and the norm taken over the sum as a single process
// takes it (a bf16 store: each rank's share is rounded to bf16 before the
// sum, which is rounded once more, so the bits are not one process's). The
// optimizer state is sharded (ZeRO-1): each rank holds the moments of one
// part of whole blocks of every tensor (eng_adamw8_part, model.h opt_off),
// updates the weights there, and the parts are gathered so that every rank
// has the whole updated model for the next forward; blocks are independent,
// so the parts' updates are the whole tensor's bits. What computes is
// gathered: the fp32 weights, whole on every rank, or with a bf16 working
// copy (eng_spec.work_bf16) the working copy, and then each rank holds the
// fp32 master of its part only (model.h w_part). Checkpoints hold whole
// tensors' state (gathered for rank 0 to write, cut again on load), so any
// world size resumes any other's.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/bf16.h"
#include "common/clock.h"
#include "dist/coll.h"
#include "kernels/kernels.h"
#include "optim/adamw8.h"
#include "run.h"

int eng_run_dist_check(const eng_spec *s, eng_err *e) {
  const eng_coll *c = s->coll;
  if (!c || c->world == 1) return 0;
#define BAD(...) return eng_err_set(e, ENG_ENOTSUP, "data parallel over %d ranks: " __VA_ARGS__)
  if (s->batch % c->world || s->micro_batches % c->world)
    return eng_err_set(e, ENG_EINVAL,
                       "data parallel over %d ranks: batch (%d) and micro_batches (%d) must both divide by it, so "
                       "that each rank computes whole micro-batches of the global split",
                       c->world, s->batch, s->micro_batches);
  if (s->device_gpu >= 0) BAD("the cuda backend has not been run data parallel yet; run on the cpu", c->world);
  if (s->method == ENG_METHOD_POETX) BAD("POET-X is not data parallel yet", c->world);
  if (s->clip_lagged) BAD("clip_lagged updates shards before their gradients are summed over the ranks", c->world);
  if (s->select.rule || s->select.band_file) BAD("data selection is not data parallel yet", c->world);
#undef BAD
  return 0;
}

int eng_run_dist_world(const eng_spec *s) { return s->coll ? s->coll->world : 1; }
int eng_run_dist_rank(const eng_spec *s) { return s->coll ? s->coll->rank : 0; }

// This rank's rows of a global batch of B rows of T.
static size_t rank_off(const eng_run *r) {
  const eng_coll *c = r->spec.coll;
  return (size_t)c->rank * (size_t)(r->spec.batch / c->world) * (size_t)r->spec.seq_len;
}

int eng_run_dist_run(eng_run *r, const int32_t *ids, const int32_t *labels, const int32_t *pos, int backward,
                     eng_exec_result *res, eng_err *e) {
  const eng_coll *c = r->spec.coll;
  if (!c || c->world == 1) return eng_exec_run(r->exec, ids, labels, pos, backward, NULL, r->spec.cancel, res, e);
  const int B = r->spec.batch, T = r->spec.seq_len;
  // The global batch's counted tokens, as the executor counts them.
  int64_t count = 0;
  for (int b = 0; b < B; b++)
    for (int t = 0; t + 1 < T; t++) count += labels[(size_t)b * T + t + 1] >= 0;
  size_t off = rank_off(r);
  eng_exec_count_set(r->exec, count);
  int rc = eng_exec_run(r->exec, ids + off, labels + off, pos ? pos + off : NULL, backward, NULL, r->spec.cancel, res,
                        e);
  if (rc) return rc;
  // Collectives are called from this thread only: the copies and updates the
  // run started are done first.
  eng_exec_quiesce(r->exec);
  double t0 = eng_now();
  eng_coll *cc = r->spec.coll;
  if ((rc = cc->ops->all_reduce(cc, &res->loss_sum, 1, ENG_COLL_F64, e))) return rc;
  res->t_comm = eng_now() - t0;
  res->count = count;
  if (!backward) return 0;
  eng_model *m = &r->model;
  res->grad_sumsq = 0;
  for (int s = 0; s < m->lo.n_shards; s++) {
    eng_shard *sh = &m->shards[s];
    size_t n = s == 0 ? eng_model_embed_grad_floats(m) : sh->g_numel;
    t0 = eng_now();
    if ((rc = cc->ops->all_reduce(cc, sh->g, n, sh->g_bf16 ? ENG_COLL_BF16 : ENG_COLL_F32, e))) return rc;
    res->t_comm += eng_now() - t0;
    // Shard order, each shard's sum as the executor takes it (a bf16 store:
    // over the values stored, as the cuda backend does).
    res->grad_sumsq += sh->g_bf16 ? eng_bf16_sumsq(sh->g, n) : eng_k_sumsq(sh->g, n);
  }
  return 0;
}

// Parts of tensor i of shard s, in elements of the shard as it computes (its
// layout: the working copy's, or the fp32 weights' when they are whole).
static void parts_of(const eng_run *r, const eng_shard *sh, int i, size_t *off, size_t *n) {
  const eng_coll *c = r->spec.coll;
  eng_adamw8_opts ao = {0}; // the part's state knows the whole tensor's block
  ao.block = sh->opt[i].block;
  ao.min_quant_numel = 1;
  ao.fp32_state = !sh->opt[i].quantized;
  size_t numel = sh->frozen[i] ? 0 : sh->tensors[i].numel;
  for (int k = 0; k < c->world; k++) {
    eng_adamw8_part(numel, &ao, c->world, k, &off[k], &n[k]);
    off[k] += sh->tensors[i].off;
  }
}

int eng_run_dist_weights_gather(eng_run *r, double *t_comm, eng_err *e) {
  eng_coll *c = r->spec.coll;
  if (!c || c->world == 1) return 0;
  eng_exec_quiesce(r->exec); // the parts are updated
  double t0 = eng_now();
  size_t *off = malloc(2 * (size_t)c->world * sizeof *off), *n = off ? off + c->world : NULL;
  if (!off) return eng_err_set(e, ENG_ENOMEM, "data parallel: no memory to gather the weights");
  int rc = 0;
  eng_model *m = &r->model;
  for (int s = 0; !rc && s < m->lo.n_shards; s++) {
    eng_shard *sh = &m->shards[s];
    for (int i = 0; !rc && i < sh->n_tensors; i++) {
      if (sh->frozen[i]) continue;
      parts_of(r, sh, i, off, n);
      // What the next forward reads: the working copy where there is one.
      rc = sh->work ? c->ops->all_gather_parts(c, sh->work, off, n, ENG_COLL_BF16, e)
                    : c->ops->all_gather_parts(c, sh->w, off, n, ENG_COLL_F32, e);
    }
  }
  free(off);
  *t_comm += eng_now() - t0;
  return rc;
}

int eng_run_dist_shard_get(eng_run *r, int s, float *dst, eng_err *e) {
  const eng_shard *sh = &r->model.shards[s];
  if (!sh->w_part) {
    eng_model_shard_get(&r->model, s, dst);
    return 0;
  }
  eng_coll *c = r->spec.coll;
  size_t *off = malloc(2 * (size_t)c->world * sizeof *off), *n = off ? off + c->world : NULL;
  if (!off) return eng_err_set(e, ENG_ENOMEM, "data parallel: no memory to gather the fp32 master");
  int rc = 0;
  for (int i = 0; !rc && i < sh->n_tensors; i++) {
    parts_of(r, sh, i, off, n);
    memcpy(dst + off[c->rank], sh->w + sh->w_off[i], n[c->rank] * sizeof(float));
    rc = c->ops->all_gather_parts(c, dst, off, n, ENG_COLL_F32, e);
  }
  free(off);
  return rc;
}

// One tensor's whole state from every rank's part (every rank gets it).
static int state_gather(eng_run *r, const eng_shard *sh, int i, eng_adamw8_state *full, eng_err *e) {
  eng_coll *c = r->spec.coll;
  const eng_adamw8_state *part = &sh->opt[i];
  eng_adamw8_opts ao = {.block = part->block, .min_quant_numel = 1, .fp32_state = !part->quantized};
  size_t numel = sh->frozen[i] ? 0 : sh->tensors[i].numel;
  int rc = eng_adamw8_state_init(full, numel, &ao, NULL, e);
  if (rc) return rc;
  size_t *off = malloc(4 * (size_t)c->world * sizeof *off);
  if (!off) {
    eng_adamw8_state_free(full);
    return eng_err_set(e, ENG_ENOMEM, "data parallel: no memory to gather the optimizer state");
  }
  size_t *n = off + c->world, *boff = n + c->world, *bn = boff + c->world;
  for (int k = 0; k < c->world; k++) {
    eng_adamw8_part(numel, &ao, c->world, k, &off[k], &n[k]);
    boff[k] = off[k] / (size_t)part->block;
    bn[k] = (n[k] + (size_t)part->block - 1) / (size_t)part->block;
  }
  eng_adamw8_state_copy(full, sh->opt_off[i], part, 0, part->numel);
  if (part->quantized) {
    rc = c->ops->all_gather_parts(c, full->mq, off, n, ENG_COLL_U8, e);
    if (!rc) rc = c->ops->all_gather_parts(c, full->vq, off, n, ENG_COLL_U8, e);
    if (!rc) rc = c->ops->all_gather_parts(c, full->ms, boff, bn, ENG_COLL_F32, e);
    if (!rc) rc = c->ops->all_gather_parts(c, full->vs, boff, bn, ENG_COLL_F32, e);
  } else {
    rc = c->ops->all_gather_parts(c, full->m, off, n, ENG_COLL_F32, e);
    if (!rc) rc = c->ops->all_gather_parts(c, full->v, off, n, ENG_COLL_F32, e);
  }
  free(off);
  if (rc) eng_adamw8_state_free(full);
  return rc;
}

int eng_run_dist_state_save(eng_run *r, const eng_store *st, const eng_shard *sh, int i, const char *name,
                            eng_err *e) {
  const eng_coll *c = r->spec.coll;
  if (!c || c->world == 1) return st->ckpt_put(st->ctx, name, sh->opt[i].mem, sh->opt[i].bytes, e);
  eng_adamw8_state full;
  int rc = state_gather(r, sh, i, &full, e);
  if (rc) return rc;
  rc = st->ckpt_put(st->ctx, name, full.mem, full.bytes, e); // nowhere but on rank 0 (eng_run_dist_store)
  eng_adamw8_state_free(&full);
  return rc;
}

int eng_run_dist_state_load(eng_run *r, const eng_store *st, int64_t step, eng_shard *sh, int i, const char *name,
                            eng_err *e) {
  const eng_coll *c = r->spec.coll;
  eng_adamw8_state *part = &sh->opt[i];
  if (!c || c->world == 1) {
    // Read in place, then let the optimizer vet the state it will trust.
    int rc = st->ckpt_get(st->ctx, step, name, part->mem, part->bytes, e);
    return rc ? rc : eng_adamw8_state_restore(part, part->mem, part->bytes, e);
  }
  eng_adamw8_opts ao = {.block = part->block, .min_quant_numel = 1, .fp32_state = !part->quantized};
  eng_adamw8_state full;
  int rc = eng_adamw8_state_init(&full, sh->frozen[i] ? 0 : sh->tensors[i].numel, &ao, NULL, e);
  if (rc) return rc;
  rc = st->ckpt_get(st->ctx, step, name, full.mem, full.bytes, e);
  if (!rc) rc = eng_adamw8_state_restore(&full, full.mem, full.bytes, e);
  if (!rc) eng_adamw8_state_copy(part, 0, &full, sh->opt_off[i], part->numel);
  eng_adamw8_state_free(&full);
  return rc;
}

size_t eng_run_dist_opt_bytes(const eng_run *r) {
  const eng_model *m = &r->model;
  if (!r->spec.coll || r->spec.coll->world == 1) return eng_model_opt_bytes(m);
  size_t n = 0;
  for (int s = 0; s < m->lo.n_shards; s++) {
    const eng_shard *sh = &m->shards[s];
    for (int i = 0; i < sh->n_tensors; i++) {
      eng_adamw8_opts ao = {.block = sh->opt[i].block, .min_quant_numel = 1, .fp32_state = !sh->opt[i].quantized};
      n += eng_adamw8_state_bytes(sh->frozen[i] ? 0 : sh->tensors[i].numel, &ao);
    }
  }
  return n;
}

// Ranks other than 0 take part in a save (its gathers) and write nothing.
static int discard_begin(void *ctx, int64_t step, eng_err *e) { return (void)ctx, (void)step, (void)e, 0; }
static int discard_put(void *ctx, const char *name, const void *data, size_t n, eng_err *e) {
  return (void)ctx, (void)name, (void)data, (void)n, (void)e, 0;
}
static int discard_commit(void *ctx, eng_err *e) { return (void)ctx, (void)e, 0; }
static const eng_store discard = {.ckpt_begin = discard_begin, .ckpt_put = discard_put, .ckpt_commit = discard_commit};

const eng_store *eng_run_dist_store(const eng_run *r, const eng_store *st) {
  const eng_coll *c = r->spec.coll;
  return c && c->rank > 0 ? &discard : st;
}
