// The planner under data parallelism (issue 19, DESIGN §3 and §10): a plan
// is made for one rank's share of the batch on a profile with ranks and the
// rate of their all-reduce (comm_bps). Checked here, on the tests' tiny model
// and a synthetic cpu machine (unit/plan_machine.h):
//   - the cost model's host state of a rank is what a rank's model allocates,
//     to the byte (the optimizer state of its part, the embedding's gradient
//     store whole), its updates are 1/W of one process's, and its
//     communication is 2 (W - 1) / W of the gradient store summed plus
//     (W - 1) / W of the weights gathered, at comm_bps;
//   - the simulator puts exactly that time before the forward (the step at a
//     finite rate against an unbounded one), and the plan reports it;
//   - a host budget that one process's state overflows and a rank's fits: the
//     planner refuses W = 1 naming host memory and plans W = 4;
//   - a plan keeps its ranks through JSON, and a run of another world size
//     refuses it;
//   - under `mpirun -np 2` the ranks train 30 steps with the plan (rank 0
//     made it and wrote it; both load it): the losses are bit-identical to
//     the same ranks under the uniform policy.
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dist/coll.h"
#include "dist/dist.h"
#include "launch.h"
#include "losses.h"
#include "model/model.h"
#include "plan/sim.h"
#include "tiny.h"
#include "unit/tmpdir.h"
#include "unit/plan_machine.h"

enum { STEPS = 30, BATCH = 4, SEQ = 64, MICRO = 1 };

static void spec_of(eng_spec *s) {
  tiny_spec(s, 4);
  s->batch = BATCH;
  s->seq_len = SEQ;
  s->micro_batches = BATCH / MICRO;
  s->grad_dtype = ENG_GRAD_F32;
  s->total_steps = STEPS;
}

// The machine with ranks: a rank plans its share of BATCH.
static eng_profile machine(const eng_spec *s, int ranks) {
  eng_profile p = plan_machine(s, BATCH / ranks, SEQ, MICRO, 1e6, 1e6);
  p.grad_store_bytes = 4; // the spec's fp32 gradient store
  p.ranks = ranks;
  p.comm_bps = 1e9;
  return p;
}

static void check_cost(const eng_spec *s) {
  eng_err e = {0};
  const int W = 2;
  eng_profile p = machine(s, W), one = machine(s, 1);
  eng_plan_cost k, k1;
  CHECK_OK(eng_plan_cost_make(&s->config, BATCH / W, SEQ, MICRO, &p, &k, &e), &e);
  CHECK_OK(eng_plan_cost_make(&s->config, BATCH, SEQ, MICRO, &one, &k1, &e), &e);
  eng_model m;
  eng_model_opts mo = {.opt_parts = W, .opt_part = 0}; // rank 0's model, as engine.c holds it
  CHECK_OK(eng_model_alloc(&m, &s->config, &mo, &e), &e);
  CHECK(k.host_opt == (double)eng_model_opt_bytes(&m) && k.host_grad == (double)eng_model_grad_bytes(&m) &&
            k.host_master == (double)eng_model_master_bytes(&m),
        "W=2: the cost model's rank state (opt %.0f, grad %.0f, master %.0f) is not what a rank allocates (%zu, %zu, "
        "%zu)",
        k.host_opt, k.host_grad, k.host_master, eng_model_opt_bytes(&m), eng_model_grad_bytes(&m),
        eng_model_master_bytes(&m));
  eng_model_free(&m);
  CHECK(fabs(k.t_opt_layer - k1.t_opt_layer / W) <= 1e-12 * k1.t_opt_layer, "a rank's update is not 1/W of one's");
  double reduce = 2.0 * (W - 1) / W * k.host_grad, gather = (W - 1.0) / W * k.params * 4;
  CHECK(k.comm_reduce == reduce && k.comm_gather == gather && k.t_reduce == reduce / p.comm_bps &&
            k.t_gather == gather / p.comm_bps,
        "W=2: communication %.0f + %.0f bytes (%.3g + %.3g s), expected %.0f + %.0f", k.comm_reduce, k.comm_gather,
        k.t_reduce, k.t_gather, reduce, gather);
  printf("W=2: a rank holds %.0f bytes of optimizer state (one process %.0f), moves %.0f + %.0f bytes a step\n",
         k.host_opt, k1.host_opt, k.comm_reduce, k.comm_gather);

  // The simulator: the same plan at comm_bps and at an unbounded rate.
  eng_plan_opts po;
  eng_plan_opts_defaults(&po);
  po.time_limit = 1;
  po.micro_batch = MICRO;
  eng_plan pl;
  CHECK_OK(eng_plan_make(&s->config, "tiny", BATCH / W, SEQ, &p, &po, &pl, &e), &e);
  eng_profile fast = p;
  fast.comm_bps = 1e300;
  eng_plan_cost kf;
  CHECK_OK(eng_plan_cost_make(&s->config, BATCH / W, SEQ, MICRO, &fast, &kf, &e), &e);
  eng_plan_sim a, b;
  CHECK_OK(eng_plan_simulate(&pl, &k, &a, &e), &e);
  CHECK_OK(eng_plan_simulate(&pl, &kf, &b, &e), &e);
  double dt = a.step_time - b.step_time, want = k.t_reduce + k.t_gather;
  CHECK(fabs(dt - want) <= 1e-9 * a.step_time && pl.t_comm == want && pl.ranks == W,
        "W=2: the step is %.6g s longer at comm_bps, the communication takes %.6g s (plan: %.6g s, %d ranks)", dt,
        want, pl.t_comm, pl.ranks);
  printf("W=2: the simulated step %.6f s, of it %.6f s communication (%.1f%%)\n", a.step_time, want,
         100 * want / a.step_time);
  eng_plan_sim_free(&a);
  eng_plan_sim_free(&b);

  // Through JSON, and refused by a run of another world size.
  char *json;
  eng_plan back;
  CHECK_OK(eng_plan_to_json(&pl, &json, &e), &e);
  CHECK_OK(eng_plan_from_json(json, &back, &e), &e);
  free(json);
  CHECK(back.ranks == W && back.t_comm == pl.t_comm, "JSON: ranks %d, t_comm %g", back.ranks, back.t_comm);
  eng_spec one_proc = *s;
  one_proc.batch = BATCH / W, one_proc.micro_batches = BATCH / W / MICRO;
  one_proc.plan = &back;
  eng_run *r = NULL;
  int rc = eng_open(&one_proc, &r, &e);
  CHECK(rc == ENG_EINVAL && strstr(e.msg, "made for 2 ranks, this run is one process"), "one process ran a W=2 plan: %d %s",
        rc, e.msg);
  eng_plan_free(&back);
  eng_plan_free(&pl);

  // A host budget between a rank's state (W = 4) and one process's.
  eng_profile p4 = machine(s, 4), p1 = machine(s, 1);
  eng_plan_cost k4;
  CHECK_OK(eng_plan_cost_make(&s->config, BATCH / 4, SEQ, MICRO, &p4, &k4, &e), &e);
  p1.host_bytes = p4.host_bytes = (k4.host_state + k1.host_state) / 2, p1.host_reserve = p4.host_reserve = 0;
  p1.host_act_bytes = p4.host_act_bytes = 0;
  rc = eng_plan_make(&s->config, "tiny", BATCH, SEQ, &p1, &po, &pl, &e);
  CHECK(rc == ENG_ECAP && strstr(e.msg, "host"), "W=1 over a host budget of %.0f bytes: rc %d, %s", p1.host_bytes, rc,
        e.msg);
  printf("W=1 refused with host memory %.0f bytes: %s\n", p1.host_bytes, e.msg);
  CHECK_OK(eng_plan_make(&s->config, "tiny", BATCH / 4, SEQ, &p4, &po, &pl, &e), &e);
  printf("W=4 planned in the same budget: a rank's state %.0f bytes, one process's %.0f\n", k4.host_state,
         k1.host_state);
  eng_plan_free(&pl);
}

static void plan_path(char *path, size_t n) { snprintf(path, n, "%s/plan.json", getenv("DIST_DIR")); }

static void losses_path(char *path, size_t n, const char *what) {
  snprintf(path, n, "%s/%s", getenv("DIST_DIR"), what);
}

// A rank: the uniform policy, then the plan; rank 0 writes both runs' losses.
static int rank_main(void) {
  eng_err e = {0};
  eng_coll *c = dist_rank_open();
  eng_spec s;
  spec_of(&s);
  s.coll = c;
  double uniform[STEPS], planned[STEPS];
  tiny_train(&s, uniform, 0, STEPS, NULL, NULL, NULL);
  char path[4200];
  plan_path(path, sizeof path);
  eng_plan pl;
  CHECK_OK(eng_plan_load(path, &pl, &e), &e);
  s.plan = &pl;
  tiny_train(&s, planned, 0, STEPS, NULL, NULL, NULL);
  eng_plan_free(&pl);
  if (c->rank == 0) {
    losses_path(path, sizeof path, "uniform");
    dist_losses_write(path, uniform, STEPS);
    losses_path(path, sizeof path, "planned");
    dist_losses_write(path, planned, STEPS);
  }
  c->ops->close(c);
  return 0;
}

int main(void) {
  eng_dist_env env;
  eng_err e = {0};
  CHECK_OK(eng_dist_env_read(&env, (const char *(*)(const char *))getenv, &e), &e);
  if (env.launcher != ENG_DIST_SINGLE) return rank_main();
  eng_spec s;
  spec_of(&s);
  check_cost(&s);

  char dir[] = "/tmp/test_dist_plan.XXXXXX";
  CHECK(mkdtemp(dir), "mkdtemp failed");
  setenv("DIST_DIR", dir, 1);
  setenv("OMP_NUM_THREADS", "1", 1);
  // The plan the ranks run: a device that holds two and a half boundaries
  // of the share, so that the plan recomputes or places boundaries in host
  // memory.
  eng_profile p = plan_machine(&s, BATCH / 2, SEQ, MICRO, 2.5, 2.2);
  p.grad_store_bytes = 4;
  p.ranks = 2;
  p.comm_bps = 1e9;
  eng_plan_opts po;
  eng_plan_opts_defaults(&po);
  po.time_limit = 1;
  po.micro_batch = MICRO;
  eng_plan pl;
  CHECK_OK(eng_plan_make(&s.config, "tiny", BATCH / 2, SEQ, &p, &po, &pl, &e), &e);
  int host = 0, rec = 0;
  for (int i = 1; i < pl.n_layers; i++) host += pl.bnd[i].materialised && pl.bnd[i].tier == ENG_TIER_HOST;
  for (int i = 1; i < pl.n_layers; i++) rec += !pl.bnd[i].materialised;
  char path[4200];
  plan_path(path, sizeof path);
  CHECK_OK(eng_plan_save(&pl, path, &e), &e);
  eng_plan_free(&pl);
  CHECK(dist_launch(2) == 0, "mpirun -np 2 failed (127: mpirun is missing; run deploy/install-deps.sh)");
  double uniform[STEPS], planned[STEPS];
  losses_path(path, sizeof path, "uniform");
  dist_losses_read(path, uniform, STEPS);
  losses_path(path, sizeof path, "planned");
  dist_losses_read(path, planned, STEPS);
  CHECK(!memcmp(uniform, planned, sizeof uniform), "W=2 with the plan: the losses differ from the uniform policy's");
  printf("W=2 with a plan (%d boundaries in host memory, %d recomputed): %d losses bit-identical to the uniform "
         "policy (%.6f -> %.6f)\n",
         host, rec, STEPS, planned[0], planned[STEPS - 1]);
  char cmd[sizeof dir + 16];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK(system(cmd) == 0, "cannot remove %s", dir);
  printf("ok\n");
  return 0;
}
