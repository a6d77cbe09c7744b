// One layout: the device bytes the planner predicts for a plan (its fixed
// bytes plus its activation peak) are, to the byte, the arena the executor
// lays out for that plan (eng_exec_tiers_of), on both backends' layouts, for
// the program's plans and the baseline policies over many shapes, budgets and
// micro-batch splits.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "exec/exec.h"
#include "plan/cost.h"
#include "plan/planner.h"

static eng_config shape(int L, int d, int heads, int kv, int ff, int qk_norm, int vocab) {
  return (eng_config){.arch = qk_norm ? ENG_ARCH_QWEN3 : ENG_ARCH_LLAMA, .vocab = vocab, .d_model = d, .n_layers = L,
                      .n_heads = heads, .n_kv_heads = kv, .head_dim = d / heads, .d_ff = ff, .max_pos = 4096,
                      .rope_theta = 1e6f, .rms_eps = 1e-6f, .init_std = 0.02f, .qk_norm = qk_norm};
}

// A machine on which the device holds dev_bnds boundaries of activations,
// the host host_bnds, NVMe nvme_bnds, and a boundary crosses PCIe in about a
// layer's forward.
static eng_profile machine(const eng_config *c, int cuda, int batch, int T, int mb, double dev_bnds,
                           double host_bnds, double nvme_bnds) {
  int a = cuda ? 2 : 4;
  eng_profile p = {.gemm_flops = 2e10, .gemm_bwd_flops = 2e10, .gemm_half_rows = 64, .attn_flops = 1e10,
                   .elem_bytes_per_s = 2e10, .opt_params_per_s = 1e9, .act_bytes = a, .weight_bytes = a,
                   .grad_bytes = cuda ? 2 : 4, .grad_store_bytes = cuda ? 2 : 4, .pinned_copy = cuda,
                   .opt_8bit = 1, .opt_inline = !cuda, .device_bytes = 1e12, .host_bytes = 1e12,
                   .nvme_bytes = 1e12, .h2d = 1e12, .d2h = 1e12, .nvme_read = 1e12, .nvme_write = 1e12};
  snprintf(p.name, sizeof p.name, "layout test");
  snprintf(p.backend, sizeof p.backend, "%s", cuda ? "cuda" : "cpu");
  eng_plan_cost k;
  eng_err e = {0};
  CHECK_OK(eng_plan_cost_make(c, batch, T, mb, &p, &k, &e), &e);
  p.h2d = p.d2h = k.bnd / k.t_fwd;
  p.nvme_read = p.nvme_write = k.bnd / (1.5 * k.t_fwd);
  p.device_act_bytes = dev_bnds * k.bnd_dev;
  p.host_act_bytes = host_bnds * k.bnd;
  p.nvme_bytes = nvme_bnds * k.bnd;
  return p;
}

static int checked;

static void same_bytes(const eng_plan *pl, const eng_config *c, const eng_profile *p) {
  eng_exec_policy ep = {.batch = pl->batch, .seq_len = pl->seq_len, .micro_batches = pl->n_micro,
                        .cuda = !strcmp(p->backend, "cuda"), .grad_bf16 = p->grad_bytes == 2, .plan = pl};
  eng_exec_tiers t;
  eng_err e = {0};
  CHECK_OK(eng_exec_tiers_of(c, &ep, &t, &e), &e);
  uint64_t predicted = pl->dev_fixed + pl->peak_dev;
  CHECK(t.device == predicted, "%s on %s (L %d, d %d, batch %d/%d): the executor lays out %zu bytes, the plan "
        "predicts %llu (fixed %llu + activations %llu)", pl->method, p->backend, c->n_layers, c->d_model, pl->batch,
        pl->micro_batch, t.device, (unsigned long long)predicted, (unsigned long long)pl->dev_fixed,
        (unsigned long long)pl->peak_dev);
  checked++;
}

int main(void) {
  const struct {
    eng_config c;
    int batch, T, mb;
    double dev, host, nvme;
  } cases[] = {
      {shape(8, 256, 4, 2, 704, 1, 512), 8, 128, 8, 3.5, 2.2, 6.0},
      {shape(12, 256, 4, 2, 704, 1, 512), 8, 128, 4, 6.5, 1.3, 9.0},
      {shape(6, 128, 2, 1, 352, 0, 300), 4, 64, 2, 2.5, 0.0, 8.0},
      {shape(10, 192, 3, 3, 512, 1, 1000), 6, 96, 3, 40.0, 4.0, 0.0},
      {shape(16, 128, 2, 2, 384, 0, 256), 8, 32, 8, 9.0, 0.0, 0.0},
      {shape(5, 320, 5, 1, 864, 1, 700), 2, 200, 1, 2.5, 3.0, 3.0},
  };
  const eng_plan_policy pols[] = {ENG_POLICY_EVERY_K, ENG_POLICY_ALL_HOST, ENG_POLICY_NONE};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (int cuda = 0; cuda <= 1; cuda++) {
      const eng_config *c = &cases[i].c;
      eng_profile p = machine(c, cuda, cases[i].batch, cases[i].T, cases[i].mb, cases[i].dev, cases[i].host,
                              cases[i].nvme);
      eng_plan_opts o;
      eng_plan_opts_defaults(&o);
      o.time_limit = 0.5;
      o.micro_batch = cases[i].mb;
      eng_plan pl;
      eng_err e = {0};
      CHECK_OK(eng_plan_make(c, "layout", cases[i].batch, cases[i].T, &p, &o, &pl, &e), &e);
      same_bytes(&pl, c, &p);
      eng_plan_free(&pl);
      for (int q = 0; q < 3; q++)
        for (int k = 1; k <= 3; k += 2) {
          int rc = eng_plan_baseline(c, "layout", cases[i].batch, cases[i].T, &p, pols[q], k, cases[i].mb, &pl, &e);
          if (rc == ENG_ECAP) continue; // does not fit this machine's budgets
          CHECK_OK(rc, &e);
          same_bytes(&pl, c, &p);
          eng_plan_free(&pl);
        }
    }
  CHECK(checked >= 30, "only %d plans checked", checked);
  printf("%d plans: the predicted device bytes are the executor's arena, to the byte\n", checked);
  return 0;
}
