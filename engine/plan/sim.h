// The simulator (DESIGN §3): replays a plan on the cost model event by event
// and checks it, independently of the program that made it.
//
// The replay runs one steady-state step: compute entries in the executor's
// order (forward, head, then per block the recompute and the backwards),
// weight copies on the host-to-device link as the two weight slots free,
// gradient copies on the device-to-host link as the two gradient slots fill,
// the host optimizer in the order the next forward needs it, and the plan's
// transfers, issued at their window's start; a window ends when its compute
// and its transfers are done. Step time is from the end of one step's last
// backward to the end of the next.
#ifndef ENG_PLAN_SIM_H
#define ENG_PLAN_SIM_H

#include "plan/cost.h"
#include "plan/plan.h"

typedef struct eng_plan_sim {
  double step_time;    // seconds
  double t_compute;    // busy time of the compute stream
  double t_recompute;  // of it, block recompute and layer re-forwards
  double t_exposed;    // step_time - t_compute
  double t_comm;       // of it, with ranks: the sum over them and the gather of the parts
  double peak_dev, peak_host, peak_nvme; // activation bytes at the peak of each tier
  int n_win;
  double *win_start, *win_end; // [2L + 1]
  int n_span;
  eng_plan_span *span;
} eng_plan_sim;

// Replays p on k (the cost of the plan's job and micro-batch split).
int eng_plan_simulate(const eng_plan *p, const eng_plan_cost *k, eng_plan_sim *s, eng_err *e);
void eng_plan_sim_free(eng_plan_sim *s);

// Checks p against k from scratch: the block structure, every transfer's
// bytes, order and deadline (out before back in, written before read, on the
// device before its block's backward), the bytes of each tier in every window
// against its budget, and the bytes on each link in every window against the
// window's compute plus its exposed time. 0, or ENG_EINVAL naming the first
// violation.
int eng_plan_check(const eng_plan *p, const eng_plan_cost *k, eng_err *e);

// Activation bytes held by each tier in each window (full buffers: a boundary
// partly moved holds its whole buffer), as eng_plan_check counts them.
// dev/host/nvme: [2L + 1] each.
int eng_plan_occupancy(const eng_plan *p, const eng_plan_cost *k, double *dev, double *host,
                       double *nvme, eng_err *e);

// An SVG timeline of the replayed step: lanes compute, copy-in, copy-out,
// NVMe and optimizer (malloc'ed text).
int eng_plan_svg(const eng_plan *p, const eng_plan_sim *s, char **out, eng_err *e);

// The replay's figures into the plan's predictions.
void eng_plan_sim_apply(eng_plan *p, const eng_plan_sim *s);

#endif
