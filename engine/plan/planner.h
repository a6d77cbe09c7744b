// The planner (DESIGN §3): makes the plan a job runs with. For a model, a
// global batch (or "auto") and a device profile it chooses the micro-batch
// split and, per split, solves the activation program (recompute blocks,
// materialisation and tier of every boundary, inner activations kept, the
// window of every spilled byte) with GLPK, starting from a heuristic plan so
// that a feasible plan always comes back within the time limit. The plan
// with the highest simulated tokens/s wins. A job that fits under no split
// is refused before anything is allocated, naming the budget that fails and
// by how many bytes.
//
// Threads: GLPK keeps per-thread state; one planning call per thread at a time.
#ifndef ENG_PLAN_PLANNER_H
#define ENG_PLAN_PLANNER_H

#include "common/err.h"
#include "model/config.h"
#include "plan/plan.h"
#include "plan/profile.h"

typedef struct eng_plan_opts {
  double time_limit; // seconds for the whole search (default 5)
  double mip_gap;    // stop once proven within this relative gap (default 0.01);
                     // the gap is taken against the objective, floored at 0.1%
                     // of the step time so that tie-breakers cannot hold the search
  int max_block;     // longest recompute block (default 8)
  int micro_batch;   // sequences per micro-batch; 0: the planner chooses
  int no_host, no_nvme, no_keep; // forbid the host tier, the NVMe tier, keeping inner activations
  int heuristic_only; // return the heuristic plan without branch and bound
} eng_plan_opts;

void eng_plan_opts_defaults(eng_plan_opts *o);

// Plans `batch` sequences of seq_len tokens (batch 0: the largest batch that
// fits, see eng_plan_max_batch) of model c on profile p. ENG_ECAP when the
// job does not fit: the message names the budget and the missing bytes.
int eng_plan_make(const eng_config *c, const char *model_name, int batch, int seq_len,
                  const eng_profile *p, const eng_plan_opts *o, eng_plan *out, eng_err *e);

// The largest global batch (sequences, at most `limit`) for which some plan
// fits every budget; 0 with an ENG_ECAP explanation when not even batch 1 fits.
int eng_plan_max_batch(const eng_config *c, int seq_len, const eng_profile *p,
                       const eng_plan_opts *o, int limit, int *batch, eng_err *e);

// Baseline policies, as plans (their transfers scheduled by the same
// program with every choice fixed), for comparison in the same cost model.
typedef enum {
  ENG_POLICY_EVERY_K = 0, // a checkpoint every k layers on the device (k = 4: MegaTrain)
  ENG_POLICY_ALL_HOST = 1, // every boundary materialised in host memory
  ENG_POLICY_NONE = 2,     // only boundary 0: the backward recomputes everything once
} eng_plan_policy;

// micro_batch 0: the split with the highest tokens/s. ENG_ECAP when the
// policy does not fit the budgets.
int eng_plan_baseline(const eng_config *c, const char *model_name, int batch, int seq_len,
                      const eng_profile *p, eng_plan_policy pol, int k, int micro_batch,
                      eng_plan *out, eng_err *e);

// GLPK keeps an environment per thread from its first call; this releases
// the calling thread's (nothing when it has none), so that a thread that
// planned and then ends leaves no memory behind. No planner call may be in
// progress on the thread.
void eng_plan_thread_release(void);

const char *eng_plan_policy_name(eng_plan_policy pol);

#endif
