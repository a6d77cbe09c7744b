// A plan (plan/plan.h) as the executor's policy: where each boundary lives
// and which layers keep their inner activations. The executor keeps every
// buffer the plan places on the device for the whole step and moves host and
// store boundaries on the compute thread; the plan's transfer windows are
// the order a device with copy streams overlaps them in.
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
