// Optimizer-state memory: the bytes the model state allocates for
// optimizer moments and block scales, summed over every tensor's region as
// allocated, stay at or below 2.05 bytes per parameter with the default
// 8-bit optimizer, for the demo model and a ~1.1B Llama-shaped config. The
// regions are calloc-style zeroed pages, so the 1B state is allocated for
// real but costs little resident memory here. eng_model_state_bytes, which
// the daemon's memory admission counts on, predicts the state as allocated,
// also where the fp32 master is held in parts (data parallel with a working
// copy: a quarter of it on each of 4 ranks).
#include "check.h"
#include "model/model.h"

// The host bytes of the state as allocated: weights, gradient store,
// working copy, optimizer regions.
static size_t allocated(const eng_model *m) {
  size_t n = eng_model_opt_bytes(m);
  for (int s = 0; s < m->lo.n_shards; s++) {
    const eng_shard *sh = &m->shards[s];
    n += sh->w_numel * sizeof(float) + sh->numel * ((sh->g_bf16 ? 2 : 4) + (sh->work ? 2 : 0));
  }
  return n;
}

static void check_predicted(const char *name, const eng_model *m, const eng_config *c, const eng_model_opts *o) {
  size_t got = allocated(m), want = eng_model_state_bytes(c, o);
  CHECK(got == want, "%s: the state allocated %zu bytes, eng_model_state_bytes says %zu", name, got, want);
}

static void check_config(const char *name, const eng_config *c, int full) {
  eng_err e = {0};
  eng_model m;
  eng_model_opts o = {.grad_bf16 = 1};
  CHECK_OK(eng_model_alloc(&m, c, &o, &e), &e);
  size_t params = m.lo.total_numel, opt = eng_model_opt_bytes(&m);
  double per = (double)opt / (double)params;
  printf("%-6s %11zu parameters: optimizer state %zu bytes allocated, %.4f bytes/parameter\n", name, params,
         opt, per);
  CHECK(per <= 2.05, "%s: %.4f bytes of optimizer state per parameter", name, per);
  check_predicted(name, &m, c, &o);
  eng_model_free(&m);
  if (!full) return;
  // fp32 moments, for contrast: 8 bytes per parameter.
  o.opt_fp32 = 1;
  CHECK_OK(eng_model_alloc(&m, c, &o, &e), &e);
  per = (double)eng_model_opt_bytes(&m) / (double)params;
  printf("%-6s fp32 AdamW for contrast: %.4f bytes/parameter\n", name, per);
  CHECK(per >= 8.0, "fp32 moments take %.4f bytes/parameter", per);
  check_predicted(name, &m, c, &o);
  eng_model_free(&m);
  // A GPU's state: fp32 gradients and a bf16 working copy.
  o = (eng_model_opts){.work_bf16 = 1};
  CHECK_OK(eng_model_alloc(&m, c, &o, &e), &e);
  check_predicted(name, &m, c, &o);
  size_t master = eng_model_master_bytes(&m);
  eng_model_free(&m);
  // Data parallel over 4 with a working copy: a rank's fp32 master is its
  // part of every tensor, a quarter of the whole.
  for (int k = 0; k < 4; k++) {
    o = (eng_model_opts){.work_bf16 = 1, .opt_parts = 4, .opt_part = k};
    CHECK_OK(eng_model_alloc(&m, c, &o, &e), &e);
    check_predicted(name, &m, c, &o);
    double q = (double)eng_model_master_bytes(&m) / ((double)master / 4);
    CHECK(q > 0.9 && q < 1.1 && m.shards[1].w_part, "%s: part %d of 4 holds %.3f of a quarter of the fp32 master",
          name, k, q);
    printf("%-6s data parallel over 4, part %d: fp32 master %.3f of a quarter\n", name, k, q);
    eng_model_free(&m);
  }
}

int main(void) {
  // traind-train's "demo" preset and make demo's model (deploy/example-job.yaml).
  eng_config demo = {.arch = ENG_ARCH_QWEN3, .vocab = 256, .d_model = 384, .n_layers = 6, .n_heads = 6, .n_kv_heads = 2,
                     .head_dim = 64, .d_ff = 1024, .max_pos = 4096,
                     .rope_theta = 10000.0f, .rms_eps = 1e-6f, .init_std = 0.02f, .tie_embeddings = 1, .qkv_bias = 0, .qk_norm = 1};
  // traind-train's "1b" preset: TinyLlama's shape, 1.1B parameters.
  eng_config b1 = {.arch = ENG_ARCH_LLAMA, .vocab = 32000, .d_model = 2048, .n_layers = 22, .n_heads = 32, .n_kv_heads = 4,
                   .head_dim = 64, .d_ff = 5632, .max_pos = 4096,
                   .rope_theta = 10000.0f, .rms_eps = 1e-5f, .init_std = 0.02f, .tie_embeddings = 0, .qkv_bias = 0, .qk_norm = 0};
  check_config("demo", &demo, 1);
#if defined(__SANITIZE_ADDRESS__)
  (void)b1; // 9 GB of model state under ASan's shadow memory: the plain build checks it
  printf("1.1B config: skipped under the sanitizers\n");
#else
  check_config("1.1B", &b1, 0);
#endif
  return 0;
}
