// The planner's cost model (DESIGN §3): what one optimizer step of a job
// costs on a profile, per layer and per tier, for one micro-batch split.
//
// The step (DESIGN §2) is a sequence of compute windows, each one layer's
// worth of compute with transfers beside it:
//   F_0 .. F_{L-1}   forward of layer l, all micro-batches
//   H                the head and loss, forward and backward, chunked
//   B_{L-1} .. B_0   backward of layer j; when j is the last layer of a
//                    recompute block (s, j+1) with s < j, the window starts by
//                    recomputing layers s .. j-1 from boundary s
// Boundary i is the input of layer i (i = L: the input of the head).
// Per-layer figures are single numbers: exact where the layers are alike,
// the mean over the layers of a hybrid's kinds (cost.c says how close that
// is), with the inner activations of the largest kind, which is what the
// executor's slots hold.
#ifndef ENG_PLAN_COST_H
#define ENG_PLAN_COST_H

#include "model/config.h"
#include "plan/profile.h"

#define ENG_PLAN_MAX_LAYERS 512

typedef struct eng_plan_cost {
  int L, batch, seq_len, micro_batch, n_micro;
  int d_model, act_bytes;

  // Bytes.
  double bnd;          // one boundary activation of the whole batch (B*T*d), as it crosses a link
  double bnd_dev;      // one buffer of the executor's boundary pool on the device
  double inner;        // one layer's inner activations kept for its backward (whole batch)
  double w_layer, w_head; // weights streamed in per layer / for the head stage
  double g_layer, g_head; // gradients copied out per layer / for the head stage
  double dev_fixed;    // device bytes every plan needs (exec.h's eng_exec_arena: two weight
                       // and two gradient slots, the two working boundaries, one micro-batch
                       // of workspace, the head's buffers, the backend's own)
  double host_state;   // host bytes of the training state: the sum of
  double host_master, host_opt, host_grad, host_pinned, host_poet; // fp32 master,
                       // optimizer moments, gradient store, pinned working copy,
                       // POET-X's θ with its moments and gradients (model/model.h)
  double params;       // parameters of the model

  // Seconds.
  double t_fwd;        // one layer's forward, whole batch
  double t_bwd;        // one layer's backward given its inner activations
  double t_refwd;      // re-forward of a layer before its backward (= t_fwd): saved
                       // when the plan keeps the layer's inner activations
  double t_rec;        // one layer of a block's recompute: its forward, or its
                       // weights' copy when that takes longer (each recomputed
                       // layer streams its weights again, one slot ahead)
  double t_head;       // head + loss, forward and backward
  double t_opt_layer, t_opt_embed, t_opt_head; // host optimizer pass per shard (a rank's part)
  int opt_inline;

  // Data parallelism (profile.h ranks > 1; 1: one process): after the
  // backward the gradients are summed over the ranks, then every update runs
  // (this rank's parts), then the parts are gathered, and only then does the
  // forward start (engine/dist_run.c). Bytes each rank moves per step, the
  // collective calls that move them, and their seconds at the profile's
  // comm_bps and comm_latency.
  int ranks;
  double comm_reduce;  // 2 (W - 1) / W of the gradient store: the loss and a call per shard
  double comm_gather;  // (W - 1) / W of what computes (fp32 weights, or the working copy): a call per tensor
  int calls_reduce, calls_gather;
  double t_reduce, t_gather;

  // Links, bytes per second.
  double h2d, d2h, nvme_read, nvme_write;

  // What activations may use in each tier, bytes (budgets less fixed needs).
  double cap_dev;      // device: min(device - reserve - dev_fixed, device_act_bytes cap)
  double cap_host;     // host: min(host - reserve - host_state, host_act_bytes cap)
  double cap_nvme;
  double dev_budget, host_budget; // device - reserve, host - reserve (for messages)

  // The forward paced by the optimizer, the weight stream and, with ranks,
  // the reduction and gather before it (no activation traffic touches the
  // host-to-device link in the forward): t_pre = step start (the previous
  // backward's last compute) to the start of F_0; d_fwd[l] = start of the
  // next window - start of F_l.
  double t_pre;
  double d_fwd[ENG_PLAN_MAX_LAYERS];
} eng_plan_cost;

// Fills the cost of one step of `batch` sequences of seq_len tokens of model
// c split into micro-batches of micro_batch sequences, on profile p.
// Refuses shapes that do not divide, more than ENG_PLAN_MAX_LAYERS layers,
// and a config that does not validate. A negative cap_* means the fixed needs
// alone exceed that budget (the planner names it).
int eng_plan_cost_make(const eng_config *c, int batch, int seq_len, int micro_batch,
                       const eng_profile *p, eng_plan_cost *out, eng_err *e);

// Recomputes t_rec, t_pre and d_fwd from the other fields (after a caller changed
// bandwidths, weight bytes or times, e.g. to pin budgets in a test).
void eng_plan_cost_pace(eng_plan_cost *k);

// Window index of F_l, H, B_j in time order (0 .. 2L).
static inline int eng_plan_win_fwd(int l) { return l; }
static inline int eng_plan_win_head(int L) { return L; }
static inline int eng_plan_win_bwd(int L, int j) { return 2 * L - j; }

#endif
