// A job the planner cannot fit is refused before anything is allocated,
// naming the budget that fails and by how many bytes: host memory (the
// training state), device memory (slots, working boundaries, workspace), and
// the activation tiers (device, host, NVMe) when no placement fits. Batch
// "auto" finds the largest batch that fits: that batch plans, one more is
// refused.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "plan/cost.h"
#include "plan/planner.h"

static eng_config tiny(int L) {
  return (eng_config){.arch = ENG_ARCH_QWEN3, .vocab = 512, .d_model = 256, .n_layers = L, .n_heads = 4,
                      .n_kv_heads = 2, .head_dim = 64, .d_ff = 704, .max_pos = 512, .rope_theta = 1e6f,
                      .rms_eps = 1e-6f, .init_std = 0.02f, .qk_norm = 1};
}

static const char *src(const char *dir, const char *name) {
  static char path[1024];
  snprintf(path, sizeof path, "%s/engine/plan/%s/%s", TRAIND_SOURCE_DIR, dir, name);
  return path;
}

static eng_profile load_profile(const char *name) {
  eng_profile p;
  eng_err e = {0};
  CHECK_OK(eng_profile_load(src("profiles", name), &p, &e), &e);
  return p;
}

// The plan is refused with ENG_ECAP, naming `budget`, with a shortfall in bytes.
static void refused(const eng_config *c, int batch, const eng_profile *p, const char *budget) {
  eng_plan_opts o;
  eng_plan_opts_defaults(&o);
  o.time_limit = 1;
  eng_plan plan;
  eng_err e = {0};
  int rc = eng_plan_make(c, "model", batch, 1024, p, &o, &plan, &e);
  printf("%s\n", e.msg);
  CHECK(rc == ENG_ECAP, "expected a refusal, got %d", rc);
  const char *at = strstr(e.msg, budget);
  CHECK(at, "the refusal does not name \"%s\"", budget);
  const char *by = strstr(at, "short by ");
  CHECK(by && atof(by + 9) > 0, "the refusal does not say by how many bytes");
}

static void budgets(void) {
  eng_config c27;
  eng_err e = {0};
  CHECK_OK(eng_config_load(NULL, src("models", "qwen3.6-27b.json"), &c27, &e), &e);
  // The 27B's host state (~272 GB) in 128 GiB.
  eng_profile p = load_profile("rtx3090.json");
  p.host_bytes = 128.0 * 1073741824.0;
  p.host_reserve = 0;
  refused(&c27, 2, &p, "host memory: the training state needs");
  // Its head alone (vocab x hidden in bf16, four slots) in 4 GiB of device.
  p = load_profile("rtx3090.json");
  p.device_bytes = 4.0 * 1073741824.0;
  p.device_reserve = 0;
  refused(&c27, 1, &p, "device memory");
  // Activations: a tiny model whose boundaries fit nowhere.
  eng_config c = tiny(8);
  p = load_profile("h800-sxm.json");
  eng_plan_cost k;
  CHECK_OK(eng_plan_cost_make(&c, 64, 1024, 1, &p, &k, &e), &e);
  p.device_act_bytes = 1.5 * k.bnd; // the first backward block's start and little else
  p.host_act_bytes = 1.0;
  p.nvme_bytes = 1.0;
  refused(&c, 64, &p, "device activation memory");
  // Room on the device for the boundaries in flight but no tier to hold the rest.
  p.device_act_bytes = 3.5 * k.bnd;
  p.host_act_bytes = 0.2 * k.bnd;
  refused(&c, 64, &p, "activation memory");
}

static void auto_batch(void) {
  eng_config c = tiny(8);
  eng_profile p = load_profile("h800-sxm.json");
  eng_plan_cost k;
  eng_err e = {0};
  CHECK_OK(eng_plan_cost_make(&c, 1, 1024, 1, &p, &k, &e), &e);
  // Per sequence, one boundary is k.bnd bytes: allow about ten at batch 16.
  p.device_act_bytes = 3.2 * 16 * k.bnd;
  p.host_act_bytes = 4.1 * 16 * k.bnd;
  p.nvme_bytes = 0;
  eng_plan_opts o;
  eng_plan_opts_defaults(&o);
  o.time_limit = 1;
  int b;
  CHECK_OK(eng_plan_max_batch(&c, 1024, &p, &o, 4096, &b, &e), &e);
  printf("largest batch: %d\n", b);
  CHECK(b >= 8 && b < 4096, "largest batch %d", b);
  eng_plan plan;
  CHECK_OK(eng_plan_make(&c, "tiny", b, 1024, &p, &o, &plan, &e), &e);
  eng_plan_free(&plan);
  CHECK(eng_plan_make(&c, "tiny", b + 1, 1024, &p, &o, &plan, &e) == ENG_ECAP, "batch %d + 1 should not fit", b);
  printf("batch %d: %s\n", b + 1, e.msg);
  CHECK_OK(eng_plan_make(&c, "tiny", 0, 1024, &p, &o, &plan, &e), &e);
  CHECK(plan.batch == b, "batch auto planned %d, not the largest %d", plan.batch, b);
  eng_plan_free(&plan);
  // Not even one sequence: the refusal names the budget.
  p.device_act_bytes = 0.5 * k.bnd;
  CHECK(eng_plan_max_batch(&c, 1024, &p, &o, 4096, &b, &e) == ENG_ECAP && b == 0 && strstr(e.msg, "short by"), "%s",
        e.msg);
  printf("batch auto: %s\n", e.msg);
}

int main(void) {
  budgets();
  auto_batch();
  printf("ok\n");
  return 0;
}
