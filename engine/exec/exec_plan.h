// A plan (plan/plan.h) as per-boundary places and per-layer keep flags, for
// callers that hold those arrays; eng_exec_policy.plan runs the plan itself,
// transfers included.
#ifndef ENG_EXEC_EXEC_PLAN_H
#define ENG_EXEC_EXEC_PLAN_H

#include <stdint.h>

#include "engine.h"
#include "plan/plan.h"

// place and keep have p->n_layers entries. ENG_EINVAL when the plan does not
// describe n_layers layers or its batch does not split into its micro-batches.
int eng_exec_plan_policy(const eng_plan *p, int n_layers, eng_place *place, uint8_t *keep, int *micro_batches,
                         eng_err *e);

#endif
