#include "exec/exec_plan.h"

int eng_exec_plan_policy(const eng_plan *p, int n_layers, eng_place *place, uint8_t *keep, int *micro_batches,
                         eng_err *e) {
  if (p->n_layers != n_layers)
    return eng_err_set(e, ENG_EINVAL, "plan: made for %d layers, the model has %d", p->n_layers, n_layers);
  if (p->micro_batch < 1 || p->n_micro < 1 || p->micro_batch * p->n_micro != p->batch)
    return eng_err_set(e, ENG_EINVAL, "plan: batch %d is not %d micro-batches of %d", p->batch, p->n_micro,
                       p->micro_batch);
  for (int l = 0; l < n_layers; l++) {
    const eng_plan_bnd *b = &p->bnd[l];
    place[l] = !b->materialised ? ENG_PLACE_NONE
               : b->tier == ENG_TIER_DEVICE ? ENG_PLACE_DEVICE
               : b->tier == ENG_TIER_HOST   ? ENG_PLACE_HOST
                                            : ENG_PLACE_STORE;
    keep[l] = p->keep_inner[l] != 0;
  }
  *micro_batches = p->n_micro;
  return 0;
}
