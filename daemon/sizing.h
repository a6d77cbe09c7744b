// Compute-optimal sizing for PlanJob (DESIGN §8): a FLOP or GPU-hour
// budget, the scaling-law fit's N_opt and D_opt (engine/compute/scaling.h),
// and the nearest Qwen3-shaped model to N_opt that the planner fits on this
// machine at the job's batch and sequence, planned. Shapes more than twice
// or half N_opt are not compute-optimal for the budget: none is offered. On a pool thread, like
// planning_make.
#ifndef TRAIND_SIZING_H
#define TRAIND_SIZING_H

#include "compute/scaling.h"
#include "planning.h"

enum { SIZING_MAX_SKIPPED = 8 };

typedef struct sizing {
  double flops, params_opt, tokens_opt, loss_opt;
  eng_qwen3_shape shape;
  double tokens, wall_s, loss;
  int64_t steps;
  char skipped[SIZING_MAX_SKIPPED][200];
  int n_skipped;
} sizing;

// s: the job's engine spec (its model's vocabulary, batch, seq_len, device
// cap, method); flops > 0, or gpu_hours > 0 (the budget is then the model
// FLOPs the chosen shape's plan runs at for that long, found by iterating
// from the spec's own model). On success *plan and *svg are the chosen
// shape's. ENG_ECAP when no shape near N_opt fits (the skipped ones say why).
int sizing_make(planning *p, const eng_spec *s, const eng_scaling_fit *fit, double flops, double gpu_hours,
                sizing *out, eng_plan *plan, char **svg, eng_err *e);

#endif
