// The planner tests' job and machine. plan_spec: the tests' tiny model of
// `layers` layers, batch x seq tokens in micro-batches of micro sequences,
// spilling to a real store (sp, opened here; the caller made the temporary
// directory). plan_machine: a cpu profile whose links move a boundary in
// about a layer's forward and whose device holds dev_bnds boundaries of
// activations, the host host_bnds, for spec s's model and training method.
// plan_under: that machine, and the planner's plan on it (1 s of solving).
#ifndef TESTS_UNIT_PLAN_MACHINE_H
#define TESTS_UNIT_PLAN_MACHINE_H

#include <stdio.h>

#include "check.h"
#include "engine.h"
#include "plan/cost.h"
#include "plan/planner.h"
#include "tiny.h"
#include "unit/spill.h" // after unit/tmpdir.h, whose tmp_path it uses

static inline void plan_spec(eng_spec *s, spill *sp, int layers, int batch, int seq, int micro) {
  spill_open(sp, "spill", "plans");
  tiny_spec(s, layers);
  s->batch = batch;
  s->seq_len = seq;
  s->micro_batches = batch / micro;
  s->spill = &sp->es;
}

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

static inline void plan_under(const eng_spec *s, int batch, int seq, int micro, double dev_bnds, double host_bnds,
                              eng_profile *p, eng_plan *pl) {
  *p = plan_machine(s, batch, seq, micro, dev_bnds, host_bnds);
  eng_plan_opts po;
  eng_plan_opts_defaults(&po);
  po.time_limit = 1;
  po.micro_batch = micro;
  eng_err e = {0};
  CHECK_OK(eng_plan_make(&s->config, "tiny", batch, seq, p, &po, pl, &e), &e);
}

#endif
