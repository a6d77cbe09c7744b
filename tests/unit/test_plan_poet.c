// The planner on POET-X layers (issue 16): the cost model counts what a
// POET-X run holds and computes (its host state is the run's own, its
// gradients and updates are θ's and the norms', its backward has no dW0),
// refuses a block size that does not fit by the tensor's name, and its
// plans run: under budgets that force boundaries into host memory, the
// spill store and recompute, each plan trains a POET-X model across a merge
// with losses bit-identical to the uniform policy, at a device cap of
// exactly the plan's predicted bytes, and is refused one byte below it.
#define _XOPEN_SOURCE 700
#include <string.h>

#include "check.h"
#include "plan/cost.h"
#include "plan/planner.h"
#include "tiny.h"
#include "unit/tmpdir.h"
#include "unit/plan_machine.h"

enum { LAYERS = 6, BATCH = 4, SEQ = 32, MICRO = 2, STEPS = 3 };


// The losses of STEPS steps of s (which must open: the plan fits its cap).
static void losses_of(const eng_spec *s, double *loss) {
  eng_err e = {0};
  eng_run *r;
  CHECK_OK(eng_open(s, &r, &e), &e);
  for (int i = 0; i < STEPS; i++) {
    eng_metrics m;
    CHECK_OK(eng_step(r, &m, &e), &e);
    loss[i] = m.loss;
    if (i == STEPS - 1) CHECK(m.poet_merges == 1, "the run merged %lld times, expected once", (long long)m.poet_merges);
  }
  eng_close(r);
}

// The cost model's POET-X figures against the same model trained fully.
static void check_costs(const eng_spec *poet) {
  eng_spec full = *poet;
  full.method = ENG_METHOD_FULL;
  eng_profile pp = plan_machine(poet, BATCH, SEQ, MICRO, 1e6, 1e6), pf = plan_machine(&full, BATCH, SEQ, MICRO, 1e6, 1e6);
  eng_plan_cost kp, kf;
  eng_err e = {0};
  CHECK_OK(eng_plan_cost_make(&poet->config, BATCH, SEQ, MICRO, &pp, &kp, &e), &e);
  CHECK_OK(eng_plan_cost_make(&full.config, BATCH, SEQ, MICRO, &pf, &kf, &e), &e);

  // Host state: what a POET-X run allocates beyond its weights.
  eng_run *r;
  CHECK_OK(eng_open(poet, &r, &e), &e);
  double held = (double)eng_train_state_bytes(r);
  eng_close(r);
  CHECK(kp.host_opt + kp.host_grad + kp.host_poet == held,
        "the planner counts %.0f bytes of POET-X training state, the run holds %.0f", kp.host_opt + kp.host_grad +
        kp.host_poet, held);
  CHECK(kp.host_master == kf.host_master && kp.host_poet > 0 && kf.host_poet == 0 &&
            kp.host_opt + kp.host_grad < 0.5 * (kf.host_opt + kf.host_grad),
        "host state: POET-X opt %.0f grad %.0f poet %.0f, full opt %.0f grad %.0f", kp.host_opt, kp.host_grad,
        kp.host_poet, kf.host_opt, kf.host_grad);
  // What crosses back: θ's gradients and the norms', not the layer's
  // weights'; θ streams in beside W0; the forward computes more.
  CHECK(kp.g_layer < 0.5 * kf.g_layer && kp.w_layer > kf.w_layer && kp.t_fwd > kf.t_fwd,
        "per layer: POET-X g %.0f opt %.3g w %.0f fwd %.3g, full g %.0f opt %.3g w %.0f fwd %.3g", kp.g_layer,
        kp.t_opt_layer, kp.w_layer, kp.t_fwd, kf.g_layer, kf.t_opt_layer, kf.w_layer, kf.t_fwd);
  printf("per layer: POET-X gradients %.0f bytes (full %.0f), forward %.3g s (full %.3g), backward %.3g s "
         "(full %.3g); training state beyond the weights %.0f bytes (full %.0f)\n",
         kp.g_layer, kf.g_layer, kp.t_fwd, kf.t_fwd, kp.t_bwd, kf.t_bwd, kp.host_opt + kp.host_grad + kp.host_poet,
         kf.host_opt + kf.host_grad);

  // A block size that does not divide a weight: refused by its name.
  pp.poet_block = 24;
  CHECK(eng_plan_cost_make(&poet->config, BATCH, SEQ, MICRO, &pp, &kp, &e) == ENG_EINVAL &&
            strstr(e.msg, "plan: ") && strstr(e.msg, "q_proj"),
        "block 24: %s", e.msg);
}

int main(void) {
  tmp_make();
  eng_err e = {0};
  spill sp;
  eng_spec base;
  plan_spec(&base, &sp, LAYERS, BATCH, SEQ, MICRO);
  base.method = ENG_METHOD_POETX;
  base.poet_block = 16;
  base.poet_merge_every = 2;
  base.poet_lr = 1e-2f;
  check_costs(&base);

  double ref[STEPS];
  losses_of(&base, ref); // the uniform policy: every boundary on the device
  int plans = 0, host = 0, store = 0, rec = 0;
  const double budgets[][2] = {{2.5, 2.2}, {3.5, 0.0}, {3.0, 1.0}};
  for (size_t b = 0; b < sizeof budgets / sizeof budgets[0]; b++) {
    eng_profile p;
    eng_plan pl;
    plan_under(&base, BATCH, SEQ, MICRO, budgets[b][0], budgets[b][1], &p, &pl);
    eng_spec s = base;
    s.plan = &pl;
    s.device_cap = pl.dev_fixed + pl.peak_dev;
    double got[STEPS];
    losses_of(&s, got);
    CHECK(!memcmp(got, ref, sizeof ref), "budget %zu: the plan's losses differ from the uniform policy's", b);
    s.device_cap--;
    eng_run *r = NULL;
    CHECK(eng_open(&s, &r, &e) == ENG_ECAP && !r, "budget %zu: a cap one byte below the plan's was not refused", b);
    for (int i = 0; i < pl.n_layers; i++) {
      host += pl.bnd[i].materialised && pl.bnd[i].tier == ENG_TIER_HOST;
      store += pl.bnd[i].materialised && pl.bnd[i].tier == ENG_TIER_NVME;
      rec += !pl.bnd[i].materialised;
    }
    printf("budget %zu: %d transfers, cap %llu: losses bit-identical across a merge, one byte less refused\n", b,
           pl.n_xfer, (unsigned long long)s.device_cap + 1);
    plans++;
    eng_plan_free(&pl);
  }
  CHECK(host && store && rec, "the plans do not use every tier (host %d, store %d, recompute %d)", host, store, rec);
  spill_close(&sp);
  tmp_cleanup();
  return 0;
}
