// Device profiles and the planner's model configs: every shipped profile
// loads and validates; an override file changes only the fields it names;
// save and load give the same profile back; a missing or unknown field is
// refused by name. The committed configs are what the benchmark needs
// (Qwen2.5-3B/7B/14B and Llama 3.1 8B / 3.2 1B as published, the Llamas'
// parameters equal to transformers' count; Qwen3.6-27B, whose numbers are checked
// against its model card, and whose boundary at 72 x 1024 in bf16 is the
// 0.703 GiB of LazyTrain's schedule). Calibration of this machine at a tiny
// model's shapes gives positive rates within its time budget (in the CPU
// time of its thread, which a loaded machine does not stretch), and the cost
// model built from it is self-consistent.
#define _XOPEN_SOURCE 700
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "plan/cost.h"
#include "plan/profile.h"
#include "unit/tmpdir.h"

static const char *src(const char *rel) {
  static char buf[4][1024];
  static int k;
  char *p = buf[k++ & 3];
  snprintf(p, sizeof buf[0], "%s/engine/plan/%s", TRAIND_SOURCE_DIR, rel);
  return p;
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  CHECK(f && fputs(text, f) >= 0 && fclose(f) == 0, "cannot write %s", path);
}

static void profiles(void) {
  const char *names[] = {"h100-sxm.json", "h200-sxm.json", "h800-sxm.json", "rtx3090.json"};
  eng_err e = {0};
  for (int i = 0; i < 4; i++) {
    char rel[64];
    snprintf(rel, sizeof rel, "profiles/%s", names[i]);
    eng_profile p;
    CHECK_OK(eng_profile_load(src(rel), &p, &e), &e);
    CHECK(!strcmp(p.backend, "cuda") && p.act_bytes == 2 && p.gemm_flops > 1e12 && p.h2d > 1e9, "%s", names[i]);
    CHECK(p.device_bytes > p.device_reserve && p.host_bytes > p.host_reserve, "%s budgets", names[i]);
  }
  eng_profile h800;
  CHECK_OK(eng_profile_load(src("profiles/h800-sxm.json"), &h800, &e), &e);
  CHECK(h800.h2d == 12e9 && h800.nvme_read == 2.83e9 && h800.nvme_write == 3.35e9,
        "the H800 profile carries LazyTrain's measured links");

  // Override: only the named fields change.
  write_file(tmp_path("over.json"), "{\"h2d\": 5e9, \"device_act_bytes\": 1e9, \"note\": \"pinned\"}");
  eng_profile o = h800;
  CHECK_OK(eng_profile_merge_file(&o, tmp_path("over.json"), &e), &e);
  CHECK(o.h2d == 5e9 && o.device_act_bytes == 1e9 && o.d2h == h800.d2h && o.gemm_flops == h800.gemm_flops,
        "override");
  // Round trip.
  CHECK_OK(eng_profile_save(&o, tmp_path("saved.json"), "test", &e), &e);
  eng_profile back;
  CHECK_OK(eng_profile_load(tmp_path("saved.json"), &back, &e), &e);
  CHECK(!memcmp(&back, &o, sizeof o), "save then load changes the profile");
  // Refusals name the field.
  write_file(tmp_path("typo.json"), "{\"h2dd\": 5e9}");
  CHECK(eng_profile_merge_file(&o, tmp_path("typo.json"), &e) == ENG_EINVAL && strstr(e.msg, "\"h2dd\""), "%s", e.msg);
  write_file(tmp_path("partial.json"), "{\"name\": \"x\", \"backend\": \"cuda\"}");
  CHECK(eng_profile_load(tmp_path("partial.json"), &o, &e) == ENG_EINVAL && strstr(e.msg, "is missing"), "%s", e.msg);
  write_file(tmp_path("neg.json"), "{\"h2d\": -1}");
  o = h800;
  CHECK(eng_profile_merge_file(&o, tmp_path("neg.json"), &e) == ENG_EINVAL && strstr(e.msg, "\"h2d\""), "%s", e.msg);
  CHECK(o.h2d == h800.h2d, "a refused override leaves the profile as it was");
}

static void configs(void) {
  const struct {
    const char *file;
    int L, d, heads, kv, ff, vocab;
    double params;
  } want[] = {
      {"models/qwen2.5-3b.json", 36, 2048, 16, 2, 11008, 151936, 3.09e9},
      {"models/qwen2.5-7b.json", 28, 3584, 28, 4, 18944, 152064, 7.62e9},
      {"models/qwen2.5-14b.json", 48, 5120, 40, 8, 13824, 152064, 14.77e9},
      // Its text model: 26,895,998,464 parameters as transformers counts them.
      {"models/qwen3.6-27b.json", 64, 5120, 24, 4, 17408, 248320, 26.895998464e9},
      // Llama 3.1 8B and 3.2 1B as published (llama3 RoPE), at transformers' counts.
      {"models/llama-3.1-8b.json", 32, 4096, 32, 8, 14336, 128256, 8030261248.0},
      {"models/llama-3.2-1b.json", 16, 2048, 32, 8, 8192, 128256, 1235814400.0},
      // Mistral 7B v0.3 as published (no window), at transformers' count.
      {"models/mistral-7b-v0.3.json", 32, 4096, 32, 8, 14336, 32768, 7248023552.0},
  };
  eng_err e = {0};
  eng_profile p;
  CHECK_OK(eng_profile_load(src("profiles/h800-sxm.json"), &p, &e), &e);
  for (int i = 0; i < (int)(sizeof want / sizeof want[0]); i++) {
    eng_config c;
    CHECK_OK(eng_config_load(NULL, src(want[i].file), &c, &e), &e);
    CHECK(c.n_layers == want[i].L && c.d_model == want[i].d && c.n_heads == want[i].heads &&
              c.n_kv_heads == want[i].kv && c.d_ff == want[i].ff && c.vocab == want[i].vocab,
          "%s", want[i].file);
    eng_plan_cost k;
    CHECK_OK(eng_plan_cost_make(&c, 72, 1024, 1, &p, &k, &e), &e);
    CHECK(fabs(k.params / want[i].params - 1) < 0.005, "%s: %.4g parameters", want[i].file, k.params);
    if (i < 3) continue;
    CHECK(k.params == want[i].params, "%s: %.0f parameters, transformers counts %.0f", want[i].file, k.params,
          want[i].params);
    if (c.arch == ENG_ARCH_MISTRAL) continue;
    if (i > 3) {
      CHECK(c.rope.type == ENG_ROPE_LLAMA3 && c.rope.original_max_pos == 8192 && c.rope_theta == 500000.0f,
            "%s: its llama3 RoPE", want[i].file);
      continue;
    }
    CHECK(fabs(k.bnd / 1073741824.0 - 0.703) < 0.0005, "27B boundary %.4f GiB", k.bnd / 1073741824.0);
    // The model card: 16 x (3 x (Gated DeltaNet -> FFN) -> 1 x (Gated Attention -> FFN)); DeltaNet
    // heads 16 for q/k, 48 for v, of 128; attention 24 q / 4 kv heads of 256, RoPE on 64 of them;
    // the text model of a Qwen3_5ForConditionalGeneration, untied.
    CHECK(c.vlm && c.full_every == 4 && c.dn.k_heads == 16 && c.dn.v_heads == 48 && c.dn.k_dim == 128 &&
              c.dn.v_dim == 128 && c.dn.conv == 4 && c.head_dim == 256 && c.rope_dim == 64 && !c.tie_embeddings &&
              c.attn_gate && c.norm_plus_one && c.max_pos == 262144 && c.rope_theta == 1e7f,
          "Qwen3.6-27B's config does not match its model card");
  }
}

static double seconds(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void calibration(void) {
  eng_config c = {.arch = ENG_ARCH_QWEN3, .vocab = 512, .d_model = 128, .n_layers = 4, .n_heads = 4,
                  .n_kv_heads = 2, .head_dim = 32, .d_ff = 352, .max_pos = 256, .rope_theta = 1e6f,
                  .rms_eps = 1e-6f, .init_std = 0.02f, .qk_norm = 1};
  eng_profile p;
  memset(&p, 0, sizeof p);
  eng_profile_set_nvme(&p, 1e9, 8e8, 1e10); // what storage would measure
  eng_err e = {0};
  // The budget holds in wall time on an idle machine. Its measuring loops
  // end by the wall clock, so this thread computes for at most the budget
  // plus the fixed work around them; waiting for a core, as other processes
  // make it do, adds wall time but no CPU time.
  double t0 = seconds(CLOCK_MONOTONIC), c0 = seconds(CLOCK_THREAD_CPUTIME_ID);
  CHECK_OK(eng_profile_calibrate_cpu(&c, 2, 128, 256.0 * (1 << 20), 2.0, &p, &e), &e);
  double secs = seconds(CLOCK_MONOTONIC) - t0, cpu = seconds(CLOCK_THREAD_CPUTIME_ID) - c0;
  printf("calibrated in %.2f s (%.2f s of CPU): GEMM %.3g (bwd %.3g) FLOP/s, half at %.0f rows; attention %.3g / %.3g; "
         "elementwise %.3g B/s; memcpy %.3g B/s; AdamW %.3g params/s\n",
         secs, cpu, p.gemm_flops, p.gemm_bwd_flops, p.gemm_half_rows, p.attn_flops, p.attn_bwd_flops,
         p.elem_bytes_per_s, p.h2d, p.opt_params_per_s);
  CHECK(cpu < 6.0, "calibration computed for %.2f s for a 2 s budget", cpu);
  CHECK_OK(eng_profile_validate(&p, "calibrated", &e), &e);
  CHECK(!strcmp(p.backend, "cpu") && p.opt_inline && p.act_bytes == 4 && p.nvme_write == 8e8, "cpu fields");
  CHECK_OK(eng_profile_save(&p, tmp_path("cpu.json"), "calibrated by test_plan_profile", &e), &e);
  eng_profile back;
  CHECK_OK(eng_profile_load(tmp_path("cpu.json"), &back, &e), &e);
  CHECK(!memcmp(&back, &p, sizeof p), "calibrated profile round trip");
  // The cost model on it: forward and backward from the measured rates.
  eng_plan_cost k;
  CHECK_OK(eng_plan_cost_make(&c, 4, 128, 2, &p, &k, &e), &e);
  // (Not t_bwd > t_fwd: the backward's products may measure faster per FLOP,
  // more than making up for doing twice as many on a loaded machine.)
  CHECK(k.t_fwd > 0 && k.t_bwd > 0 && k.t_head > 0 && k.cap_dev > 0 && k.cap_host > 0, "cost: fwd %g, bwd %g, "
        "head %g s, device %g, host %g bytes for activations", k.t_fwd, k.t_bwd, k.t_head, k.cap_dev, k.cap_host);
  double fwd = 0;
  for (int l = 0; l < k.L; l++) fwd += k.d_fwd[l];
  CHECK(fwd >= k.L * k.t_fwd * (1 - 1e-12) && k.t_pre > 0, "pacing");
}

int main(void) {
  tmp_make();
  profiles();
  configs();
  calibration();
  tmp_cleanup();
  printf("ok\n");
  return 0;
}
