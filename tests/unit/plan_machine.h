// The planner tests' machine: a cpu profile whose links move a boundary in
// about a layer's forward and whose device holds dev_bnds boundaries of
// activations, the host host_bnds, for spec s's model and training method
// at batch x seq tokens in micro-batches of micro sequences.
#ifndef TESTS_UNIT_PLAN_MACHINE_H
#define TESTS_UNIT_PLAN_MACHINE_H

#include <stdio.h>

#include "check.h"
#include "engine.h"
#include "plan/cost.h"

static inline eng_profile plan_machine(const eng_spec *s, int batch, int seq, int micro, double dev_bnds,
                                       double host_bnds) {
  eng_profile p = {.gemm_flops = 2e10, .gemm_bwd_flops = 2e10, .attn_flops = 1e10, .elem_bytes_per_s = 2e10,
                   .opt_params_per_s = 1e9, .opt_inline = 1, .act_bytes = 4, .weight_bytes = 4, .grad_bytes = 4,
                   .grad_store_bytes = 2, .opt_8bit = 1, .device_bytes = 1e12, .host_bytes = 1e12,
                   .nvme_bytes = 1e12, .h2d = 1e12, .d2h = 1e12, .nvme_read = 1e12, .nvme_write = 1e12};
  snprintf(p.name, sizeof p.name, "test cpu");
  snprintf(p.backend, sizeof p.backend, "cpu");
  eng_spec_profile_method(s, &p);
  eng_plan_cost k;
  eng_err e = {0};
  CHECK_OK(eng_plan_cost_make(&s->config, batch, seq, micro, &p, &k, &e), &e);
  p.h2d = p.d2h = k.bnd / k.t_fwd;
  p.nvme_read = p.nvme_write = k.bnd / (1.5 * k.t_fwd);
  p.device_act_bytes = dev_bnds * k.bnd_dev;
  p.host_act_bytes = host_bnds * k.bnd;
  return p;
}

#endif
