// Compute governance (DESIGN §8): what a run has spent (tokens, FLOPs, wall
// time, summed over its resumes), the budgets that end it, and the stopping
// rules that end it early once held-out loss stops paying for its FLOPs.
// The state travels in every checkpoint, so a resumed run stops where an
// uninterrupted one would.
//
// Budgets (any combination): a step is not taken when it would pass the
// token or FLOP budget (model FLOPs, compute/flops.h, scoring passes
// included); wall time stops the run after the step that leaves less than
// another step's time. Each is thus met within one step.
//
// Stopping rules, decided at each evaluation of held-out loss:
//  - marginal gain: over the last `window` evaluations, a least-squares fit
//    of loss against ln(model FLOPs), L ≈ a + b·ln F, predicts the loss a
//    further FLOP buys, −b/F at the last one. The rule fires when that is
//    below tau (loss per FLOP) at `patience` evaluations in a row. A run
//    whose held-out loss keeps falling faster than tau per FLOP is never
//    stopped by it.
//  - generalisation loss (Prechelt 1998): GL = 100·(E/E_opt − 1), E the
//    last held-out loss and E_opt the lowest so far; fires when GL > alpha.
#ifndef ENG_COMPUTE_GOVERN_H
#define ENG_COMPUTE_GOVERN_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

typedef enum eng_stop {
  ENG_STOP_NONE,
  ENG_STOP_TOKENS,   // max_tokens
  ENG_STOP_FLOPS,    // max_flops
  ENG_STOP_WALL,     // max_wall_s
  ENG_STOP_GAIN,     // the marginal-gain rule
  ENG_STOP_GL,       // generalisation loss
} eng_stop;
// "max_tokens", "max_flops", "max_wall", "marginal_gain", "gl"; "" for none.
const char *eng_stop_name(eng_stop s);

typedef struct eng_budget {
  int64_t max_tokens;  // tokens trained on (0: no budget)
  double max_flops;    // model FLOPs (0: none)
  double max_wall_s;   // seconds of the run's wall time (0: none); "max_wall_seconds" in messages
  double gain_tau;     // marginal gain: loss per FLOP (0: the rule is off)
  int gain_patience;   // evaluations in a row below tau (0: 3)
  int gain_window;     // evaluations the fit spans (0: 4; at least 3)
  double gl_alpha;     // generalisation loss threshold, percent (0: off)
} eng_budget;

// Checks ranges; `has_eval`: the run evaluates held-out loss, which both
// rules need. Errors name the field ("budget.gain_tau ...").
int eng_budget_validate(const eng_budget *b, int has_eval, eng_err *e);

// What a run has spent, summed over its resumes.
typedef struct eng_tally {
  int64_t steps;        // steps taken
  int64_t tokens;       // tokens in them
  int64_t counted;      // of them, tokens whose loss counted (labels not -100)
  double flops_model;   // model FLOPs (compute/flops.h)
  double flops_exec;    // executed FLOPs
  double wall_s;        // wall time of the run's steps, evaluations and checkpoints
} eng_tally;

// One evaluation: where it was taken and what it measured.
typedef struct eng_eval_point {
  int64_t step, tokens;
  double flops;         // model FLOPs spent
  double loss;
} eng_eval_point;

typedef struct eng_govern {
  eng_budget b;
  eng_tally t;
  eng_eval_point *evals; // every evaluation so far
  int n_evals, cap_evals;
  int below;            // evaluations in a row with gain below tau
  double gain;          // the last fit's loss per FLOP (NAN before `window` evaluations)
  double fit_a, fit_b;  // the last fit: loss ≈ fit_a + fit_b·ln(FLOPs)
  double best;          // lowest held-out loss so far (NAN: none)
  double gl;            // the last generalisation loss, percent (NAN: none)
  eng_stop stop;        // the reason the run stopped (NONE while it runs)
} eng_govern;

void eng_govern_init(eng_govern *g, const eng_budget *b);
void eng_govern_free(eng_govern *g);

// After a step that spent `tokens`, `counted`, model and executed FLOPs and
// `wall` seconds (since the previous step ended). Returns the budget that
// the next step (costing the same) would pass, or NONE; sets g->stop.
eng_stop eng_govern_step(eng_govern *g, int64_t tokens, int64_t counted, double flops_model, double flops_exec,
                         double wall);
// Model FLOPs spent outside steps that the budget counts (scoring passes).
void eng_govern_spend(eng_govern *g, double flops_model, double flops_exec);
// After an evaluation at the current tally: keeps it, fits, applies the
// rules (g->stop names one that fired).
int eng_govern_eval(eng_govern *g, double loss, eng_err *e);

// The state as bytes for a checkpoint (malloc'ed into *out) and back; the
// budget is the spec's, not the checkpoint's.
int eng_govern_pack(const eng_govern *g, void **out, size_t *n, eng_err *e);
int eng_govern_unpack(eng_govern *g, const void *data, size_t n, eng_err *e);

#endif
