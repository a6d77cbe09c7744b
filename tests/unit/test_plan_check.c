// Plans as data, and the simulator's independent check of them:
// - every plan the planner returns, on instances that need every tier (small
//   device, little host memory, slow links) and on the 27B config with
//   LazyTrain's budgets, passes eng_plan_check, and its recorded predictions
//   are the simulator's replay; so do the baseline policies;
// - the check catches a plan broken in each way it guards against;
// - with ample links, the replay of checkpoint-every-layer equals the cost
//   model's sum of windows;
// - JSON round trips to the same text, files too, and malformed plans are
//   refused by name; the table and the SVG timeline come out.
#define _XOPEN_SOURCE 700
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "plan/cost.h"
#include "plan/planner.h"
#include "plan/sim.h"
#include "unit/tmpdir.h"

static eng_config tiny(int L) {
  return (eng_config){.arch = ENG_ARCH_QWEN3, .vocab = 512, .d_model = 256, .n_layers = L, .n_heads = 4,
                      .n_kv_heads = 2, .head_dim = 64, .d_ff = 704, .max_pos = 512, .rope_theta = 1e6f,
                      .rms_eps = 1e-6f, .init_std = 0.02f, .qk_norm = 1};
}

// A made-up machine on which a tiny model's boundaries (batch 8 x 128)
// take link_windows forward windows to cross the links, and the device,
// host and NVMe hold the given numbers of them.
static eng_profile machine(const eng_config *c, double dev_bnds, double host_bnds, double nvme_bnds,
                           double link_windows) {
  eng_profile p = {.gemm_flops = 2e10, .gemm_bwd_flops = 2e10, .gemm_half_rows = 64, .attn_flops = 1e10,
                   .elem_bytes_per_s = 2e10, .opt_params_per_s = 1e9, .act_bytes = 2, .weight_bytes = 2,
                   .grad_bytes = 2, .grad_store_bytes = 2, .pinned_copy = 1, .opt_8bit = 1, .device_bytes = 1e12,
                   .host_bytes = 1e12, .nvme_bytes = 1e12, .h2d = 1e12, .d2h = 1e12, .nvme_read = 1e12,
                   .nvme_write = 1e12};
  snprintf(p.name, sizeof p.name, "test machine");
  snprintf(p.backend, sizeof p.backend, "cuda");
  eng_plan_cost k;
  eng_err e = {0};
  CHECK_OK(eng_plan_cost_make(c, 8, 128, 8, &p, &k, &e), &e);
  p.h2d = p.d2h = k.bnd / (link_windows * k.t_fwd);
  p.nvme_read = p.nvme_write = k.bnd / (1.5 * link_windows * k.t_fwd);
  p.device_act_bytes = dev_bnds * k.bnd;
  p.host_act_bytes = host_bnds * k.bnd;
  p.nvme_bytes = nvme_bnds * k.bnd;
  return p;
}

static void check_plan(const eng_plan *plan, const eng_config *c, const eng_profile *p) {
  eng_err e = {0};
  eng_plan_cost k;
  CHECK_OK(eng_plan_cost_make(c, plan->batch, plan->seq_len, plan->micro_batch, p, &k, &e), &e);
  CHECK_OK(eng_plan_check(plan, &k, &e), &e);
  eng_plan_sim s;
  CHECK_OK(eng_plan_simulate(plan, &k, &s, &e), &e);
  CHECK(s.step_time == plan->step_time && llround(s.peak_dev) == (long long)plan->peak_dev, "recorded predictions");
  CHECK(s.peak_dev <= k.cap_dev + 1 && s.peak_host <= k.cap_host + 1 && s.peak_nvme <= k.cap_nvme + 1, "peaks");
  CHECK(fabs(s.step_time / plan->model_step_time - 1) < 0.05, "replay %.6g s, window model %.6g s", s.step_time,
        plan->model_step_time);
  eng_plan_sim_free(&s);
}

typedef struct tally {
  int plans, host, nvme, keep, recompute, exposed;
} tally;

static void count(tally *t, const eng_plan *p) {
  t->plans++;
  int h = 0, n = 0, kp = 0, rec = 0;
  for (int i = 0; i < p->n_layers; i++) {
    h |= p->bnd[i].materialised && p->bnd[i].tier == ENG_TIER_HOST;
    n |= p->bnd[i].materialised && p->bnd[i].tier == ENG_TIER_NVME;
    kp |= p->keep_inner[i];
    rec |= !p->bnd[i].materialised;
  }
  t->host += h, t->nvme += n, t->keep += kp, t->recompute += rec, t->exposed += p->t_exposed > 1e-3 * p->step_time;
}

// Plans from the planner on tight instances, and the baselines beside them.
static void planner_plans(void) {
  tally t = {0};
  eng_err e = {0};
  const struct {
    int L;
    double dev, host, nvme, link;
    int batch;
  } cases[] = {
      {12, 3.5, 2.2, 6.0, 1.0, 8}, {12, 6.5, 1.3, 9.0, 0.6, 8}, {16, 4.2, 3.1, 12.0, 1.6, 8},
      {16, 9.0, 0.0, 0.0, 0.8, 8}, {10, 24.0, 20.0, 0.0, 0.3, 8}, {12, 3.0, 0.0, 4.0, 2.5, 4},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    eng_config c = tiny(cases[i].L);
    eng_profile p = machine(&c, cases[i].dev, cases[i].host, cases[i].nvme, cases[i].link);
    eng_plan_opts o;
    eng_plan_opts_defaults(&o);
    o.time_limit = 1;
    eng_plan plan;
    int rc = eng_plan_make(&c, "tiny", cases[i].batch, 128, &p, &o, &plan, &e);
    CHECK_OK(rc, &e);
    printf("case %zu: %s, micro-batch %d, step %.4f s (exposed %.4f), gap %.3g, %.2f s\n", i, plan.method,
           plan.micro_batch, plan.step_time, plan.t_exposed, plan.gap, plan.solve_time);
    check_plan(&plan, &c, &p);
    count(&t, &plan);
    const eng_plan_policy pols[] = {ENG_POLICY_EVERY_K, ENG_POLICY_ALL_HOST, ENG_POLICY_NONE};
    for (int q = 0; q < 3; q++) {
      eng_plan base;
      rc = eng_plan_baseline(&c, "tiny", cases[i].batch, 128, &p, pols[q], 4, 0, &base, &e);
      if (rc == ENG_ECAP) continue;
      CHECK_OK(rc, &e);
      check_plan(&base, &c, &p);
      CHECK(base.step_time >= plan.step_time * (1 - 1e-9), "%s beats the plan: %.6g < %.6g", base.method,
            base.step_time, plan.step_time);
      eng_plan_free(&base);
    }
    eng_plan_free(&plan);
  }
  // The benchmark's hardest instance: Qwen3.6-27B with LazyTrain's budgets.
  eng_config c;
  eng_profile p;
  char path[1024];
  snprintf(path, sizeof path, "%s/engine/plan/models/qwen3.6-27b.json", TRAIND_SOURCE_DIR);
  CHECK_OK(eng_config_load(NULL, path, &c, &e), &e);
  snprintf(path, sizeof path, "%s/engine/plan/profiles/h800-sxm.json", TRAIND_SOURCE_DIR);
  CHECK_OK(eng_profile_load(path, &p, &e), &e);
  p.device_act_bytes = 21.55 * 1073741824.0, p.host_act_bytes = 15 * 1073741824.0, p.nvme_bytes = 32 * 1073741824.0;
  eng_plan_opts o;
  eng_plan_opts_defaults(&o);
  o.micro_batch = 72;
  o.time_limit = 1;
  eng_plan plan;
  CHECK_OK(eng_plan_make(&c, "27B", 72, 1024, &p, &o, &plan, &e), &e);
  check_plan(&plan, &c, &p);
  count(&t, &plan);
  eng_plan_free(&plan);
  printf("plans: %d; using host %d, NVMe %d, kept layers %d, recompute %d, exposed transfer %d\n", t.plans, t.host,
         t.nvme, t.keep, t.recompute, t.exposed);
  CHECK(t.plans >= 6 && t.host && t.nvme && t.keep && t.recompute && t.exposed,
        "the instances do not exercise every part of a plan");
}

// A plan with host and NVMe boundaries, and the cost it was made for.
typedef struct spilling {
  eng_plan plan;
  eng_plan_cost k;
} spilling;

static void spilling_plan(spilling *s) {
  eng_err e = {0};
  eng_config c = tiny(12);
  eng_profile p = machine(&c, 3.5, 2.2, 6.0, 1.0);
  eng_plan_opts o;
  eng_plan_opts_defaults(&o);
  o.micro_batch = 2;
  o.time_limit = 0.5;
  CHECK_OK(eng_plan_make(&c, "tiny", 8, 128, &p, &o, &s->plan, &e), &e);
  CHECK_OK(eng_plan_cost_make(&c, 8, 128, 2, &p, &s->k, &e), &e);
  int nv = 0;
  for (int i = 0; i < 12; i++) nv |= s->plan.bnd[i].materialised && s->plan.bnd[i].tier == ENG_TIER_NVME;
  CHECK(nv, "the plan should spill to NVMe");
}

static int find_xfer(const eng_plan *p, eng_lane lane) {
  for (int t = 0; t < p->n_xfer; t++)
    if (p->xfer[t].lane == lane) return t;
  CHECK(0, "no %s transfer", eng_lane_name(lane));
  return -1;
}

static void expect_refused(const eng_plan *p, const eng_plan_cost *k, const char *what) {
  eng_err e = {0};
  CHECK(eng_plan_check(p, k, &e) == ENG_EINVAL && strstr(e.msg, what), "expected \"%s\", got: %s", what, e.msg);
  printf("refused as expected: %s\n", e.msg);
}

static void broken_plans(const spilling *s) {
  const eng_plan *good = &s->plan;
  const eng_plan_cost k = s->k;
  eng_plan bad;
  eng_err e = {0};
  int t;
  // Copied out before the boundary exists.
  CHECK_OK(eng_plan_copy(&bad, good, &e), &e);
  t = find_xfer(&bad, ENG_LANE_D2H);
  bad.xfer[t].window = bad.xfer[t].boundary - 1;
  if (bad.xfer[t].window < 0) bad.xfer[t].window = 2 * bad.n_layers;
  expect_refused(&bad, &k, "outside windows");
  eng_plan_free(&bad);
  // Written to NVMe no later than it was copied out.
  CHECK_OK(eng_plan_copy(&bad, good, &e), &e);
  t = find_xfer(&bad, ENG_LANE_NVME_W);
  bad.xfer[t].window = 0;
  expect_refused(&bad, &k, "not after");
  eng_plan_free(&bad);
  // A byte range lost.
  CHECK_OK(eng_plan_copy(&bad, good, &e), &e);
  t = find_xfer(&bad, ENG_LANE_H2D);
  bad.xfer[t].bytes -= bad.row_bytes;
  expect_refused(&bad, &k, "on h2d"); // a gap, or too few bytes
  eng_plan_free(&bad);
  // A boundary the plan keeps on the device, with transfers.
  CHECK_OK(eng_plan_copy(&bad, good, &e), &e);
  t = find_xfer(&bad, ENG_LANE_D2H);
  bad.bnd[bad.xfer[t].boundary].tier = ENG_TIER_DEVICE;
  expect_refused(&bad, &k, "stays on the device");
  eng_plan_free(&bad);
  // A block that does not end where the next checkpoint is.
  CHECK_OK(eng_plan_copy(&bad, good, &e), &e);
  bad.bnd[0].block_end++;
  expect_refused(&bad, &k, "block ends");
  eng_plan_free(&bad);
  // Less device memory than the plan holds.
  eng_plan_cost small = k;
  small.cap_dev = (double)good->peak_dev - 4096;
  expect_refused(good, &small, "in device");
  small = k;
  small.cap_host = (double)good->peak_host - 4096;
  expect_refused(good, &small, "in host");
  // A slower link than the plan's windows assumed.
  small = k;
  small.d2h *= 0.25;
  expect_refused(good, &small, "on d2h");
  // Exposed time the windows do not account for.
  CHECK_OK(eng_plan_copy(&bad, good, &e), &e);
  bad.win[2].t_compute *= 0.5;
  expect_refused(&bad, &k, "computes for");
  eng_plan_free(&bad);
}

// Checkpoint after every layer on the device, with links far faster than
// compute: nothing waits but for the optimizer, so the replay is the cost
// model's sum of windows, with the optimizer beside compute (a GPU) or
// inline on the compute thread (the cpu backend), fast or slow.
static void replay_sum(void) {
  eng_config c = tiny(8);
  for (int inl = 0; inl <= 1; inl++)
    for (int slow = 0; slow <= 1; slow++) {
      eng_profile p = machine(&c, 100, 0, 0, 0.01);
      p.opt_inline = inl;
      if (slow) p.opt_params_per_s = 1e6; // an update takes longer than a forward
      eng_err e = {0};
      eng_plan plan;
      CHECK_OK(eng_plan_baseline(&c, "tiny", 8, 128, &p, ENG_POLICY_EVERY_K, 1, 4, &plan, &e), &e);
      eng_plan_cost k;
      CHECK_OK(eng_plan_cost_make(&c, 8, 128, 4, &p, &k, &e), &e);
      double sum = k.t_pre + k.t_head;
      for (int l = 0; l < 8; l++) sum += k.d_fwd[l] + k.t_bwd + k.t_refwd;
      printf("every layer on the device, optimizer %s, %s: replay %.9g s, sum of windows %.9g s\n",
             inl ? "inline" : "beside compute", slow ? "slow" : "fast", plan.step_time, sum);
      CHECK(fabs(plan.step_time - sum) <= 1e-9 * sum, "replay %.12g != %.12g", plan.step_time, sum);
      CHECK(plan.n_xfer == 0, "no transfers");
      eng_plan_free(&plan);
    }
}

static void serialisation(const spilling *s) {
  const eng_plan *plan = &s->plan;
  const eng_plan_cost *k = &s->k;
  eng_plan back;
  eng_err e = {0};
  char *a, *b;
  CHECK_OK(eng_plan_to_json(plan, &a, &e), &e);
  CHECK_OK(eng_plan_from_json(a, &back, &e), &e);
  CHECK_OK(eng_plan_to_json(&back, &b, &e), &e);
  CHECK(!strcmp(a, b), "JSON round trip changes the plan");
  CHECK_OK(eng_plan_check(&back, k, &e), &e);
  eng_plan_free(&back);
  CHECK_OK(eng_plan_save(plan, tmp_path("plan.json"), &e), &e);
  CHECK_OK(eng_plan_load(tmp_path("plan.json"), &back, &e), &e);
  free(b);
  CHECK_OK(eng_plan_to_json(&back, &b, &e), &e);
  CHECK(!strcmp(a, b), "file round trip changes the plan");
  eng_plan_free(&back);
  free(b);
  // Malformed: each refusal names what is wrong.
  const struct {
    const char *from, *to, *msg;
  } edits[] = {
      {"\"version\": 1", "\"version\": 2", "version 2"},
      {"\"micro_batch\": 2", "\"micro_batch\": 3", "is not micro_batch"},
      {"\"tier\": \"host\"", "\"tier\": \"disk\"", "unknown tier"},
      {"\"keep_inner\"", "\"keep_inners\"", "\"keep_inner\" is missing"},
      {"\"d2h\"", "\"d3h\"", "out of range"},
  };
  for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
    char *at = strstr(a, edits[i].from);
    CHECK(at, "\"%s\" not in the JSON", edits[i].from);
    size_t n = strlen(a), f = strlen(edits[i].from), t = strlen(edits[i].to);
    char *m = malloc(n + t + 1);
    memcpy(m, a, (size_t)(at - a));
    memcpy(m + (at - a), edits[i].to, t);
    strcpy(m + (at - a) + t, at + f);
    CHECK(eng_plan_from_json(m, &back, &e) == ENG_EINVAL && strstr(e.msg, edits[i].msg), "edit %zu: %s", i, e.msg);
    free(m);
  }
  CHECK(eng_plan_from_json("[1]", &back, &e) == ENG_EINVAL, "an array is no plan");
  free(a);
  // For a person: a line per boundary, the predictions; an SVG with every lane.
  char *table, *svg;
  CHECK_OK(eng_plan_table(plan, &table, &e), &e);
  CHECK(strstr(table, "boundary") && strstr(table, "nvme") && strstr(table, "predicted step"), "table:\n%s", table);
  eng_plan_sim sim;
  CHECK_OK(eng_plan_simulate(plan, k, &sim, &e), &e);
  CHECK_OK(eng_plan_svg(plan, &sim, &svg, &e), &e);
  CHECK(!strncmp(svg, "<svg", 4) && strstr(svg, "copy-in") && strstr(svg, "NVMe") && strstr(svg, "</svg>"), "svg");
  printf("%s", table);
  free(table);
  free(svg);
  eng_plan_sim_free(&sim);
}

int main(void) {
  tmp_make();
  planner_plans();
  spilling s;
  spilling_plan(&s);
  broken_plans(&s);
  replay_sum();
  serialisation(&s);
  eng_plan_free(&s.plan);
  tmp_cleanup();
  printf("ok\n");
  return 0;
}
