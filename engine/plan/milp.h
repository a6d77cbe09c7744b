// The activation program (DESIGN §3) as a GLPK problem: internal to
// traind_plan. One model per job and micro-batch split (plan/cost.h); all
// byte quantities are in units of one boundary activation, times in seconds.
//
// Variables
//   x[s][e][t]  binary: recompute block (s, e), e - s <= max_block, whose
//               start boundary s lives in tier t (device, host, NVMe). The
//               blocks form one path 0 -> L; tiering the edge keeps the
//               copy-in deadlines linear (boundary s is needed at the start
//               of B_{e-1}, which depends on e).
//   g_i c_i n_i binary: boundary i materialised on the device / host / NVMe
//               (sums of its out-edges per tier).
//   keep_l      binary: layer l keeps its inner activations on the device.
//   CDC_k CDN_k cumulative bytes copied out (device -> host) of host- and
//               NVMe-tier boundaries by the end of forward window k;
//   CWN_k       written to NVMe by the end of window k (forward and head);
//   CRN_k       read back from NVMe by the end of window k (backward);
//   CHC_k CHN_k copied in (host -> device) by the end of window k (head and
//               backward). Cumulative flows aggregate the per-boundary
//               transfers: with releases and deadlines ordered the same way
//               first-in-first-out order meets every deadline whenever the
//               cumulative rows hold (measured: the same optimum as the
//               per-boundary program, far fewer columns).
//   tau_k       exposed seconds of window k: every link of the window must
//               carry its bytes within compute + tau.
//   mo_k mi_k   integer, per stream (host tier, NVMe tier): boundaries in
//               transit out (forward) / in (backward) on the device: a partly
//               moved boundary holds a whole buffer, and each stream has at
//               most one partly moved at a time.
//               (NVMe traffic stages through a ring of host chunks that frees
//               chunk by chunk, so there bytes count, not boundaries.)
// Objective: sum tau + recompute + re-forwards + tie-breakers, less the
// exposure no plan avoids (the weight and gradient traffic's own excess
// over the minimal window), so that it measures what placement controls.
#ifndef ENG_PLAN_MILP_H
#define ENG_PLAN_MILP_H

#include <glpk.h>

#include "plan/cost.h"
#include "plan/plan.h"
#include "plan/planner.h"

enum { MILP_TIERS = 3 };

typedef struct milp {
  glp_prob *lp;
  const eng_plan_cost *k;
  int L, K;              // layers, longest block
  int tier_ok[MILP_TIERS];
  int keep_ok;
  // Column indices (0: the column does not exist).
  int *x;                // [(s * (K + 1) + len) * MILP_TIERS + t], len = e - s
  int *g, *c, *n, *keep; // [L]
  int *cdc, *cdn;        // [L]       k = 0 .. L-1
  int *cwn;              // [L + 1]   k = 0 .. L
  int *chc, *chn, *crn;  // [2L + 1]  k = L .. 2L (crn from L+1)
  int *tau;              // [2L + 1]
  int *mo[2], *mi[2];    // [2L + 1] per stream: host tier, NVMe tier
  double obj_const;      // the constant part of the objective
  double lb_step;        // step time with no recompute, re-forward or avoidable exposure
  double lam_z, lam_c, lam_n; // tie-breakers per materialised / host / NVMe boundary
  int slack[MILP_TIERS]; // elastic: the slack columns
} milp;

// Step time of the window model with no recompute, no re-forward and no
// avoidable exposure: no plan of this split does better.
double milp_lower_bound(const eng_plan_cost *k);

// Builds the program for cost k. Tiers and keeping inner activations are
// offered as o allows and as the budgets can hold one at all.
// elastic: every capacity row gets a slack column per tier (device, host,
// NVMe, in boundaries) and the objective is their sum: how far a job that
// does not fit is from fitting (the rounding cuts are left out).
int milp_build(milp *m, const eng_plan_cost *k, const eng_plan_opts *o, int elastic, eng_err *e);
void milp_free(milp *m);

// Column of x[s][e][t] (0 when absent).
static inline int milp_x(const milp *m, int s, int e, int t) {
  int len = e - s;
  if (s < 0 || s >= m->L || len < 1 || len > m->K || e > m->L) return 0;
  return m->x[((size_t)s * (m->K + 1) + len) * MILP_TIERS + t];
}

// A choice of the binaries: materialised boundaries with their tiers, kept layers.
typedef struct milp_choice {
  int8_t tier[ENG_PLAN_MAX_LAYERS];  // -1: not materialised
  uint8_t keep[ENG_PLAN_MAX_LAYERS];
} milp_choice;

// Solves the continuous and integer rest for a fixed choice: fills x[1..n]
// with every column's value and *obj. Returns 0, or 1 when the choice is
// infeasible.
int milp_solve_fixed(milp *m, const milp_choice *ch, double *x, double *obj);

// The full program: heuristic incumbent, then branch and bound within the
// time limit. Fills x[1..n], *obj, and the solver's outcome.
typedef struct milp_result {
  int found;         // a feasible solution exists (else the program is infeasible)
  int from_heuristic; // the returned solution is the heuristic's
  int optimal;
  double gap, bound, obj, seconds;
} milp_result;
int milp_solve(milp *m, const eng_plan_opts *o, double *x, milp_result *r, eng_err *e);

// Independent check of a solution vector against every row and bound: GLPK
// 5.0 has returned points that violate a row (with its MIP presolver,
// engine/plan/README.md) and, handed an incumbent, a meaningless final
// solution. Returns 1 when it holds within tol.
int milp_feasible(const milp *m, const double *x, double tol);
double milp_objective(const milp *m, const double *x);

// Turns a solution into a plan: structure, windows, transfers (rounded to
// rows, first in first out per stream).
int milp_extract(const milp *m, const double *x, eng_plan *p, eng_err *e);

// GLPK prints by default and aborts on misuse: every call into it runs with
// terminal output off (restored after).
int milp_quiet_begin(void);
void milp_quiet_end(int prev);

#endif
