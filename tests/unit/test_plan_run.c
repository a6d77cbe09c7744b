// The planner's plans, run: on a machine whose budgets force boundaries off
// the device into host memory and the spill store (a real RocksDB store),
// the program's plan and the baseline policies each train with losses and
// gradients bit-identical to the uniform policy at the same micro-batch
// split, at a device cap of exactly the plan's predicted bytes (fixed plus
// activation peak), and are refused one byte below it before allocating;
// the same for the tiny model's Qwen3.5 hybrid.
#define _XOPEN_SOURCE 700
#include <string.h>

#include "check.h"
#include "plan/cost.h"
#include "plan/planner.h"
#include "tiny.h"
#include "unit/grads.h"
#include "unit/tmpdir.h"
#include "unit/plan_machine.h"

enum { LAYERS = 8, BATCH = 4, SEQ = 32, MICRO = 2 };


typedef struct tally {
  int plans, host, store, recompute;
} tally;

static void run_plan(const eng_spec *base, const eng_plan *pl, const result *ref, int32_t *ids, int32_t *labels,
                     tally *t) {
  eng_spec s = *base;
  s.plan = pl;
  s.device_cap = pl->dev_fixed + pl->peak_dev;
  result got;
  grads_run(&s, &got, ids, labels);
  CHECK(!memcmp(got.grads, ref->grads, ref->n_grads * sizeof(float)), "%s: gradients are not bit-identical",
        pl->method);
  CHECK(!memcmp(got.loss, ref->loss, sizeof ref->loss), "%s: losses are not bit-identical", pl->method);
  grads_free(&got);
  s.device_cap--;
  eng_run *r = NULL;
  eng_err e = {0};
  CHECK(eng_open(&s, &r, &e) == ENG_ECAP && !r, "%s: a cap one byte below the plan's was not refused", pl->method);
  int host = 0, store = 0, rec = 0;
  for (int i = 0; i < pl->n_layers; i++) {
    host += pl->bnd[i].materialised && pl->bnd[i].tier == ENG_TIER_HOST;
    store += pl->bnd[i].materialised && pl->bnd[i].tier == ENG_TIER_NVME;
    rec += !pl->bnd[i].materialised;
  }
  printf("%-10s %d transfers, %d boundaries in host memory, %d in the store, %d recomputed; cap %llu: "
         "bit-identical, one byte less refused\n",
         pl->method, pl->n_xfer, host, store, rec, (unsigned long long)s.device_cap + 1);
  t->plans++, t->host += host > 0, t->store += store > 0, t->recompute += rec > 0;
}

// Every budget's plan, and the baselines on the last, for the model of base.
static void run_model(eng_spec *base, int32_t *ids, int32_t *labels, tally *t) {
  eng_err e = {0};
  result ref;
  grads_run(base, &ref, ids, labels); // the uniform policy: every boundary on the device
  const double budgets[][2] = {{2.5, 2.2}, {3.5, 0.0}, {3.0, 1.0}, {6.0, 8.0}};
  for (size_t b = 0; b < sizeof budgets / sizeof budgets[0]; b++) {
    eng_profile p;
    eng_plan pl;
    plan_under(base, BATCH, SEQ, MICRO, budgets[b][0], budgets[b][1], &p, &pl);
    run_plan(base, &pl, &ref, ids, labels, t);
    eng_plan_free(&pl);
    const eng_plan_policy pols[] = {ENG_POLICY_EVERY_K, ENG_POLICY_ALL_HOST, ENG_POLICY_NONE};
    for (int q = 0; q < 3 && b == 3; q++) {
      int rc = eng_plan_baseline(&base->config, "tiny", BATCH, SEQ, &p, pols[q], 3, MICRO, &pl, &e);
      if (rc == ENG_ECAP) continue;
      CHECK_OK(rc, &e);
      run_plan(base, &pl, &ref, ids, labels, t);
      eng_plan_free(&pl);
    }
  }
  grads_free(&ref);
}

int main(void) {
  tmp_make();
  spill sp;
  eng_spec base;
  plan_spec(&base, &sp, LAYERS, BATCH, SEQ, MICRO);
  size_t n = (size_t)BATCH * SEQ;
  int32_t ids[BATCH * SEQ], labels[BATCH * SEQ];
  for (size_t i = 0; i < n; i++) {
    ids[i] = (int32_t)((i * 7919 + 13) % 256);
    labels[i] = i % 11 == 3 ? -100 : ids[i];
  }
  tally t = {0};
  run_model(&base, ids, labels, &t);
  CHECK(t.plans >= 5 && t.host && t.store && t.recompute, "the plans do not use every tier (%d plans: host %d, "
        "store %d, recompute %d)", t.plans, t.host, t.store, t.recompute);
  // Qwen3.5's hybrid: its two kinds of layer under the same plans.
  printf("the hybrid (Gated DeltaNet, full attention every 4th layer):\n");
  tiny_hybrid(&base.config, 4);
  tally th = {0};
  run_model(&base, ids, labels, &th);
  CHECK(th.plans >= 5 && th.host && th.store && th.recompute, "the hybrid's plans do not use every tier (%d plans: "
        "host %d, store %d, recompute %d)", th.plans, th.host, th.store, th.recompute);
  spill_close(&sp);
  tmp_cleanup();
  return 0;
}
