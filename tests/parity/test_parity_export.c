// What the engine saves, transformers loads: a model trained a few steps
// (Llama, Llama 3.1 with its llama3 RoPE, Qwen2, Qwen3, Qwen3.5's hybrid, the text model of a
// Qwen3_5ForConditionalGeneration, whose vision and MTP tensors the export
// must carry bit for bit) is exported as a Hugging Face
// directory (fp32 and bf16), the engine reloads it
// with bit-identical logits, and tests/ref/check_hf_export.py loads it in
// transformers (on TRAIND_PYTHON) and compares logits to 1e-4. A POET-X run
// (Qwen2 with its frozen biases, Qwen3; a merge after update 2 and θ
// trained since) exports its effective weights: transformers scores them
// as the run itself does, to 1e-4, and the engine reloading them as a plain
// model agrees with the run to 1e-5.
#define _XOPEN_SOURCE 700
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "fixture.h"
#include "python.h"
#include "unit/tmpdir.h"

enum { B = 2, T = 64 };

static eng_run *open_dir(const char *dir) { return fx_run_open(dir, B, T); }

static float *logits_of(eng_run *r, const int32_t *ids) {
  size_t n = (size_t)B * T * eng_run_config(r)->vocab;
  float *lg = malloc(n * sizeof(float));
  double loss;
  eng_err e = {0};
  CHECK_OK(eng_debug_grads(r, ids, ids, NULL, &loss, lg, &e), &e);
  return lg;
}

int main(void) {
  tmp_make();
  const char *fixtures[] = {"llama_tied", "llama31",         "mistral", "mistral_window", "qwen2",
                            "qwen2_yarn", "qwen3", "qwen3_tied_head", "qwen3_5", "qwen3_5_vlm"};
  for (int f = 0; f < (int)(sizeof fixtures / sizeof *fixtures); f++) {
    const int vlm = !strcmp(fixtures[f], "qwen3_5_vlm");
    eng_st_file ref;
    fx_open(&ref, fixtures[f]);
    int32_t *ids = fx_i32(&ref, "input_ids", NULL);
    int32_t *labels = fx_i32(&ref, "labels", NULL);
    eng_run *r = open_dir(fx_dir(fixtures[f]));
    eng_err e = {0};
    for (int i = 0; i < 3; i++) CHECK_OK(eng_step_batch(r, ids, labels, NULL, NULL, &e), &e);
    int V = eng_run_config(r)->vocab;
    for (int bf16 = 0; bf16 <= 1; bf16++) {
      char name[64];
      snprintf(name, sizeof name, "%s-%s", fixtures[f], bf16 ? "bf16" : "fp32");
      const char *dir = tmp_path(name);
      CHECK_OK(eng_export_hf(r, dir, bf16, &e), &e);
      eng_run *back = open_dir(dir);
      float *lg = logits_of(back, ids);
      if (!bf16) {
        float *orig = logits_of(r, ids);
        CHECK(!memcmp(orig, lg, (size_t)B * T * V * sizeof(float)), "%s: reloaded logits differ", name);
        free(orig);
      }
      py_check_hf_export(dir, tmp_path("engine-logits.safetensors"), ids, lg, B, T, V, vlm ? fx_dir(fixtures[f]) : NULL);
      printf("%s: exported, reloaded, transformers agrees\n", name);
      free(lg);
      eng_close(back);
    }
    eng_close(r);
    if (!strcmp(fixtures[f], "qwen2") || !strcmp(fixtures[f], "qwen3")) {
      eng_spec s;
      eng_spec_defaults(&s);
      s.model_dir = fx_dir(fixtures[f]);
      s.batch = B, s.seq_len = T, s.lr = 1e-3f, s.device_cap = (size_t)64 << 20;
      s.method = ENG_METHOD_POETX, s.poet_block = 16, s.poet_merge_every = 2, s.poet_lr = 1e-2f;
      CHECK_OK(eng_open(&s, &r, &e), &e);
      for (int i = 0; i < 3; i++) CHECK_OK(eng_step_batch(r, ids, labels, NULL, NULL, &e), &e);
      char name[64];
      snprintf(name, sizeof name, "%s-poetx", fixtures[f]);
      const char *dir = tmp_path(name);
      CHECK_OK(eng_export_hf(r, dir, 0, &e), &e);
      float *run = logits_of(r, ids);
      eng_run *back = open_dir(dir);
      float *lg = logits_of(back, ids);
      size_t n = (size_t)B * T * V;
      double d = fx_rel(lg, run, n);
      CHECK(d <= 1e-5, "%s: the exported model's logits are %.3e off the POET-X run's", name, d);
      py_check_hf_export(dir, tmp_path("engine-logits.safetensors"), ids, run, B, T, V, NULL);
      printf("%s: exported effective weights, reloaded (%.1e), transformers agrees with the run\n", name, d);
      free(lg), free(run);
      eng_close(back);
      eng_close(r);
    }
    free(ids);
    free(labels);
    eng_st_close(&ref);
  }
  tmp_cleanup();
  return 0;
}
