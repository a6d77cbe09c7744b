// Data parallelism in the engine's run (issue 19, DESIGN §10): every rank
// reads the whole global batch from the same data stream and computes its
// share, rows [rank·B/W, (rank+1)·B/W), as micro-batches M/W of the global
// split. The loss is averaged over the global batch's tokens (the executor
// is told their count), so the ranks' gradients sum to the whole batch's.
// After the backward every shard's gradient is summed over the ranks in rank
// order (dist/coll.h) and the norm taken over the sum as a single process
// takes it (a bf16 store: each rank's share is rounded to bf16 before the
// sum, which is rounded once more, so the bits are not one process's); every rank then applies the same update to its own copy of the
// model state (replicated; the sharded optimizer is not built yet).
#include <math.h>

#include "common/bf16.h"
#include "common/clock.h"
#include "dist/coll.h"
#include "kernels/kernels.h"
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
  if (s->plan) BAD("plans are made for one process's batch; use the uniform policy", c->world);
  if (s->select.rule || s->select.band_file) BAD("data selection is not data parallel yet", c->world);
#undef BAD
  return 0;
}

int eng_run_dist_world(const eng_spec *s) { return s->coll ? s->coll->world : 1; }

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
