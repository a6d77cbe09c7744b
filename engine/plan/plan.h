// A plan is data (DESIGN §3): what the executor does with every boundary
// activation and every layer's inner activations in one optimizer step, when
// each spilled byte crosses which link, and what the planner predicts. This
// header is free of solver types so that the executor and the daemon can
// include it; plans are made by eng_plan_make (plan/planner.h), stored as
// JSON with the job, and shown as a table and an SVG timeline.
//
// The step is a sequence of compute windows in time order (plan/cost.h):
//   window k = l          F_l  forward of layer l            (l = 0 .. L-1)
//   window k = L          H    head and loss, forward and backward
//   window k = 2L - j     B_j  backward of layer j           (j = L-1 .. 0),
//                              preceded, when j + 1 ends a recompute block
//                              (s, j+1) with s < j, by the recompute of
//                              layers s .. j-1 from boundary s
// Boundary i is the input of layer i; boundary L, the input of the head, is
// the last working buffer and never stored.
//
// What the executor does with a plan:
// - Forward of layer l: if bnd[l] is materialised, keep boundary l: on the
//   device (tier DEVICE) in a buffer of its own until B_l ends, or move it
//   out (HOST, NVME) by the transfers listed for it. keep_inner[l]: keep the
//   layer's inner activations (all micro-batches) on the device until B_l.
// - Each window k, at its start, issues the transfers whose window is k, on
//   their links, in the order listed (a backward window's H2D ones when its
//   backward entry starts, after the recompute, whose weights go first); the
//   next window starts only when they are complete (so the device and host
//   bytes in use are what the plan counted). Transfers are byte ranges of one boundary (whole batch, rows
//   in micro-batch order), at multiples of one token's row.
//     D2H     device -> host (HOST and NVME boundaries, forward windows)
//     NVME_W  host -> spill store (NVME boundaries; bytes already copied out)
//     NVME_R  spill store -> host (backward windows)
//     H2D     host -> device (HOST and NVME boundaries, head and backward windows)
//   A boundary's device buffer is freed once its last D2H range is done, and
//   taken on the way back when its first H2D range starts. NVME boundaries
//   pass through a ring of host staging chunks that frees chunk by chunk: a
//   range holds its chunk from its D2H (NVME_R) window through its NVME_W
//   (H2D) window.
// - Backward: block (s, e) = bnd[s].block_end == e. Before the backward of
//   layer e-1, recompute layers s .. e-2 from boundary s (each streams its
//   weights again) into device buffers for boundaries s+1 .. e-1, freed as
//   their layers' backwards finish. The backward of layer j re-runs its
//   forward for its inner activations unless keep_inner[j].
#ifndef ENG_PLAN_PLAN_H
#define ENG_PLAN_PLAN_H

#include <stdint.h>

#include "common/err.h"

typedef enum { ENG_TIER_DEVICE = 0, ENG_TIER_HOST = 1, ENG_TIER_NVME = 2 } eng_tier;

typedef enum {
  ENG_LANE_H2D = 0,
  ENG_LANE_D2H = 1,
  ENG_LANE_NVME_W = 2,
  ENG_LANE_NVME_R = 3,
  ENG_LANE_COUNT
} eng_lane;

typedef enum { ENG_WIN_FWD = 0, ENG_WIN_HEAD = 1, ENG_WIN_BWD = 2 } eng_win_kind;

typedef struct eng_plan_bnd {
  int materialised; // 1: kept from the forward (boundary 0 always is)
  eng_tier tier;    // where, when materialised
  int block_end;    // materialised: the next materialised boundary e; layers
                    // i+1 .. e-1's inputs are recomputed from this one
} eng_plan_bnd;

typedef struct eng_plan_xfer {
  int boundary;
  eng_lane lane;
  int window;       // 0 .. 2L
  uint64_t offset;  // byte range of the boundary
  uint64_t bytes;
} eng_plan_xfer;

typedef struct eng_plan_win {
  eng_win_kind kind;
  int layer;        // F_l, B_j: l or j; H: -1
  int recompute_from; // B_j: first layer recomputed in this window (j when none)
  double t_compute;   // predicted compute seconds of the window (recompute included)
  double t_exposed;   // predicted extra seconds waiting for transfers (the planner's
                      // model; the simulator's replay is in eng_plan_sim)
} eng_plan_win;

typedef struct eng_plan {
  // The job the plan was made for.
  char model[96];    // config name or path, informational
  char profile[96];  // profile name, informational
  int n_layers;      // L
  int batch, seq_len;
  int micro_batch;   // sequences per micro-batch
  int n_micro;       // batch / micro_batch
  int ranks;         // data-parallel ranks it was made for (1: one process); batch is then one
                     // rank's share of the global batch
  int act_bytes;     // bytes per activation element on the device
  uint64_t bnd_bytes; // one boundary of the whole batch
  uint64_t row_bytes; // one token's row of a boundary (transfer granule)
  int max_block;     // longest recompute block the planner allowed

  eng_plan_bnd *bnd;     // [L + 1]
  uint8_t *keep_inner;   // [L]
  eng_plan_win *win;     // [2L + 1], window order
  int n_xfer;
  eng_plan_xfer *xfer;   // grouped by window, in issue order

  // Predictions (seconds, bytes).
  double step_time;      // the simulator's replay of this plan on the cost model
  double tokens_per_s;   // batch * seq_len / step_time
  double t_compute;      // busy time of the compute stream (recompute included)
  double t_recompute;    // of it, block recompute and layer re-forwards
  double t_exposed;      // step_time - t_compute: waiting for links and the optimizer
  double t_comm;         // of it, with ranks: the sum over them and the gather of the parts
  double model_step_time; // the solver's own estimate (window model)
  uint64_t peak_dev, peak_host, peak_nvme;  // activation bytes per tier at their peaks
  uint64_t dev_fixed;    // device bytes beside activations (slots, working buffers, workspace)
  uint64_t host_state;   // host bytes of the training state
  uint64_t params;       // parameters of the model (host_state / params: bytes per parameter)

  // How it was found.
  char method[32];       // "milp", "heuristic", or a baseline policy's name
  int optimal;           // 1: proven optimal (within the tie-breakers)
  double gap;            // relative MIP gap at the end (0 when optimal)
  double solve_time;     // seconds
  double objective;      // step time above the bound no plan beats, seconds
  double bound;          // the solver's lower bound on it
} eng_plan;

// A step on a timeline, predicted (the simulator's replay, plan/sim.h) or
// measured (the executor's record of a run, exec.h), drawn the same way
// (plan/sim.h's eng_plan_svg): spans of time on lanes.
typedef enum {
  ENG_SPAN_COMPUTE = 0,
  ENG_SPAN_H2D = 1,
  ENG_SPAN_D2H = 2,
  ENG_SPAN_NVME = 3, // writes and reads
  ENG_SPAN_OPT = 4,  // the host optimizer (beside compute, or inline on the cpu)
  ENG_SPAN_COMM = 5, // data parallel: the sum over the ranks and the gather of the updated parts
  ENG_SPAN_LANES
} eng_span_lane;

typedef struct eng_plan_span {
  eng_span_lane lane;
  double t0, t1;
  char what[12]; // "F3", "R5", "B5", "H"; "w3" weights, "g3" gradients, "b7" boundary 7, "opt"
} eng_plan_span;

// Allocates the arrays of an empty plan of L layers (every boundary but 0
// not materialised, nothing kept, no transfers).
int eng_plan_init(eng_plan *p, int L, eng_err *e);
void eng_plan_free(eng_plan *p);
// Deep copy (dst must not be initialised).
int eng_plan_copy(eng_plan *dst, const eng_plan *src, eng_err *e);
// Appends a transfer.
int eng_plan_xfer_add(eng_plan *p, int boundary, eng_lane lane, int window, uint64_t offset,
                      uint64_t bytes, eng_err *e);
// Fills win[].kind, .layer, .recompute_from and bnd[].block_end from the
// materialised boundaries; refuses a structure that is not a plan (boundary
// 0 not materialised, a block longer than max_block when max_block > 0).
int eng_plan_structure(eng_plan *p, eng_err *e);

// JSON: the whole plan (the text is malloc'ed; free it).
int eng_plan_to_json(const eng_plan *p, char **out, eng_err *e);
// Parses what eng_plan_to_json wrote (p must not be initialised; it is on success).
int eng_plan_from_json(const char *text, eng_plan *p, eng_err *e);
int eng_plan_save(const eng_plan *p, const char *path, eng_err *e);
int eng_plan_load(const char *path, eng_plan *p, eng_err *e);

// A table for a person: one line per boundary (materialised, tier, block,
// windows of its transfers), then the predictions (malloc'ed text).
int eng_plan_table(const eng_plan *p, char **out, eng_err *e);

const char *eng_tier_name(eng_tier t);
const char *eng_lane_name(eng_lane l);

#endif
