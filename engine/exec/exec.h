// The layer-streaming executor (DESIGN §2). It owns the device arena layout
// of a run: two weight slots, two gradient slots, the two working boundary
// activations of the whole batch, a pool of boundary buffers for the
// checkpoints, the boundaries in transit and the recompute (exec_sched.h),
// the kept inner activations and one micro-batch of workspace. Weights
// stream in on the copy-in worker while compute runs; gradients stream out
// on the copy-out worker with their squared norms; updates run per shard on
// the optimizer worker, and the next step's copy of shard s waits only for
// shard s's update. Activations move on four lanes (plan.h: copy-out, store
// write, store read, copy-in), each a worker: a window issues its transfers
// as it starts and ends when they have landed. The control flow is the same
// on every backend; how a backend computes (the cpu kernels in fp32, or the
// cuda kernels with bf16 storage) is in exec_cpu.c and exec_cuda.c behind
// the table of exec_impl.h.
#ifndef ENG_EXEC_EXEC_H
#define ENG_EXEC_EXEC_H

#include <stdint.h>

#include "backend/backend.h"
#include "engine.h"
#include "model/model.h"
#include "plan/plan.h"

typedef struct eng_exec_policy {
  int batch, seq_len, micro_batches;
  // Uniform policy: a boundary checkpoint every k layers (0 = only boundary
  // 0), all in one place, and keep_acts for every layer.
  int ckpt_every;
  eng_place ckpt_place;
  const eng_store *spill; // for ENG_PLACE_STORE
  int keep_acts;    // keep the layers' inner activations from the forward on the
                    // device, so the backward does not recompute them
  int opt_thread;   // updates on the optimizer thread beside compute (as with a GPU),
                    // even when the device computes on the host cores
  // A plan (plan/plan.h) instead of the uniform policy: its placement, and
  // its transfers performed window by window on the activation lanes (the
  // uniform policy's move whole boundaries: exec_sched.h). Need not outlive
  // eng_exec_open.
  const eng_plan *plan;
  double spill_bps;   // the store lanes' bandwidth, each way (common/link.h; 0: none)
  // The device the arena is laid out for: the cpu backend computes in fp32
  // on host memory; the cuda backend (cuda != 0) streams bf16 weights, keeps
  // bf16 activations, accumulates weight gradients in fp32 and finishes them
  // on the device into what the host store holds (bf16 when grad_bf16).
  int cuda;
  int grad_bf16;
  int poet_block;   // POET-X (the model's poet state, poet/state.h): the layers compute
                    // their POET chains, with the rotations' buffers in the arena
  int poet_fast;    // ... and keep each chain's inner product with the activations
                    // (exec/layer.h's acts.z) instead of recomputing it in the backward
} eng_exec_policy;

// Parameters of one update round, applied shard by shard.
typedef struct eng_exec_update {
  float lr, beta1, beta2, eps, weight_decay;
  float clip_scale;   // gradients are multiplied by this (1 = no clipping)
  int64_t t;          // 1-based optimizer step, for bias correction
  // POET-X: Adam on the θ (eps 1e-6, no decay) at poet_lr, poet_t its steps
  // since the last merge (1-based); poet_merge > 0: after this update every
  // layer merges (poet_merge is the merge's number, the permutations are
  // drawn for it from seed).
  float poet_lr;
  int64_t poet_t, poet_merge;
  uint64_t seed;
} eng_exec_update;

typedef struct eng_exec_result {
  double loss_sum;       // Σ cross-entropy over counted tokens
  int64_t count;         // counted tokens
  double grad_sumsq;     // Σ g² over the whole model (valid after a backward); on
                         // the cuda backend over the gradients as stored (bf16)
  double t_act_wait;     // waiting for activation transfers as windows end
  double t_comm;         // data parallel (engine/dist_run.c): summing over the ranks
  double t_fwd, t_loss, t_bwd, t_wait; // on the cuda backend, the time to queue each
                         // phase: the run waits for the GPU at its end (in t_bwd)
  size_t host_act, store_act; // boundary bytes this run kept in host memory / the store
  int64_t refwd_layers;  // layer forwards over the whole batch run again for the backward
} eng_exec_result;

// Bytes the policy keeps in each tier between forward and backward (the host
// and store tiers hold boundary checkpoints; the device figure is the arena).
typedef struct eng_exec_tiers {
  size_t device, host, store;
} eng_exec_tiers;

// Tier bytes the policy needs for config c (without allocating anything);
// ENG_EINVAL naming the field for a policy that cannot run.
int eng_exec_tiers_of(const eng_config *c, const eng_exec_policy *p, eng_exec_tiers *t, eng_err *e);

// The arena as the planner counts it (DESIGN §3), for config c at policy
// p's batch, sequence, micro-batches and backend: a run's arena is
//   fixed + inner · (layers keeping their inner activations) + bnd · pool
// where fixed is what every policy needs (weight and gradient slots, the
// two working boundaries, one micro-batch of workspace, the head's buffers,
// the backend's own), inner one kept layer's activations (every
// micro-batch), bnd one buffer of the boundary pool and pool the most
// boundary buffers alive in one window (exec_sched.h). bnd_bytes is one
// boundary's bytes as they cross a link.
typedef struct eng_exec_arena {
  size_t fixed, inner, bnd, bnd_bytes;
} eng_exec_arena;
int eng_exec_arena_of(const eng_config *c, const eng_exec_policy *p, eng_exec_arena *a, eng_err *e);

typedef struct eng_exec eng_exec;

// Reserves the arena (refusing a cap that is too small) and starts workers.
// p->cuda must match dev (a cuda device computes off the host); on the cuda
// backend the model must hold bf16 working copies (eng_model_opts.work_bf16),
// and the working copies and the gradient store are page-locked until close.
int eng_exec_open(eng_exec **out, eng_model *m, eng_dev *dev, const eng_exec_policy *p, eng_err *e);

// Forward (and backward when backward != 0) over one batch: ids/labels are
// [batch][seq_len]; logits, when not NULL, receives [batch][seq_len][vocab]
// (the cpu backend only: ENG_ENOTSUP on the cuda backend). After a backward
// the model's gradient store holds the batch's gradients. Polls *cancel once
// per layer (ENG_ECANCEL). On the cuda backend, call it from one thread at a
// time (that thread launches the kernels).
//
// pos: position ids, [batch][seq_len] like ids, or NULL for 0..seq_len-1 in
// every row. Several documents may be packed in a row: pos[b][0] is 0, and
// pos[b][t] is 0 where a document starts at t, else pos[b][t-1] + 1
// (ENG_EINVAL otherwise). Each token's RoPE angle is its position, and it
// attends only to the tokens of its own document up to itself, so a packed
// row computes what its documents would one by one. The loss is not told:
// the caller masks the label of each document's first token (-100), which
// would otherwise be predicted from the previous document's last token.
int eng_exec_run(eng_exec *x, const int32_t *ids, const int32_t *labels, const int32_t *pos, int backward,
                 float *logits, volatile int *cancel, eng_exec_result *res, eng_err *e);
// The number of tokens the next run's loss is averaged over, when that run
// is one part of a larger batch (a data-parallel rank's share of the global
// batch): its gradients then add up, over the parts, to the whole batch's.
// Reset by the run; its result still counts its own tokens.
void eng_exec_count_set(eng_exec *x, int64_t count);

// A forward without the loss's backward that also hands back each
// sequence's loss sum (seq_loss[batch]: over its counted targets), for
// scoring samples; pos as eng_exec_run's. The cpu backend; ENG_ENOTSUP on a GPU.
int eng_exec_score(eng_exec *x, const int32_t *ids, const int32_t *labels, const int32_t *pos, double *seq_loss,
                   volatile int *cancel, eng_exec_result *res, eng_err *e);

// Launches an update round on the optimizer worker (embedding, layers, head)
// and returns at once; the next eng_exec_run waits per shard.
void eng_exec_update_launch(eng_exec *x, const eng_exec_update *u);

// Arms an update round for the next eng_exec_run with a backward (lagged
// clipping: u's clip factor is known before the gradients). When updates run
// on the optimizer thread, each shard's update starts as soon as its
// gradients are in the host store, overlapping the rest of the backward;
// inline updates run when the next forward first needs the shard, as launched
// ones do. Results are the same either way.
void eng_exec_update_arm(eng_exec *x, const eng_exec_update *u);

// Waits until every launched update and copy has finished (before reading or
// writing the model state from outside).
void eng_exec_quiesce(eng_exec *x);

// The last run's timeline: spans on the lanes of plan.h (compute F/H/R/B,
// copy-in of weights w and boundaries b, copy-out of gradients g and
// boundaries b, store writes and reads b, inline optimizer passes), in
// seconds from the run's start (on the cuda backend a compute span is the
// time to queue its kernels). Valid until the next run.
int eng_exec_timeline(const eng_exec *x, const eng_plan_span **spans);

void eng_exec_close(eng_exec *x);

#endif
