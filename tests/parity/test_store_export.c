// A checkpoint exported from the store is a Hugging Face model: the tiny
// model trains a few steps saving through the store, its checkpoint is
// exported (fp32 in one file, bf16 split into files of at most 256 KiB),
// the engine reloads each export (fp32: logits bit-identical to the trained
// run's), and tests/ref/check_hf_export.py loads it in transformers and
// compares logits to 1e-4 (on TRAIND_PYTHON).
#define _XOPEN_SOURCE 700
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "python.h"
#include "storage/store.h"
#include "tiny.h"
#include "unit/tmpdir.h"

enum { B = 2, T = 64 };
static eng_err e;

static float *logits_of(eng_run *r, const int32_t *ids) {
  size_t n = (size_t)B * T * eng_run_config(r)->vocab;
  float *lg = malloc(n * sizeof(float));
  double loss;
  CHECK_OK(eng_debug_grads(r, ids, ids, NULL, &loss, lg, &e), &e);
  return lg;
}

int main(void) {
  tmp_make();
  store *st;
  CHECK_OK(store_open(&st, tmp_path("db"), NULL, &e), &e);
  eng_store es;
  CHECK_OK(store_engine_open(&es, st, "export", 0, &e), &e);
  eng_spec s;
  tiny_spec(&s, 2);
  s.batch = B;
  s.seq_len = T;
  eng_run *r;
  CHECK_OK(eng_open(&s, &r, &e), &e);
  for (int i = 0; i < 5; i++) CHECK_OK(eng_step(r, NULL, &e), &e);
  CHECK_OK(eng_save(r, &es, &e), &e);
  int32_t ids[B * T];
  for (int i = 0; i < B * T; i++) ids[i] = (int32_t)((i * 37 + 11) % s.config.vocab);
  int V = s.config.vocab;
  float *trained = logits_of(r, ids);

  for (int bf16 = 0; bf16 <= 1; bf16++) {
    const char *dir = tmp_path(bf16 ? "hf-bf16" : "hf-fp32");
    CHECK_OK(store_ckpt_export_hf(st, "export", -1, &s.config, dir, bf16, bf16 ? 256 << 10 : 0, NULL, NULL, &e), &e);
    eng_spec hs = s;
    hs.model_dir = dir;
    eng_run *back;
    CHECK_OK(eng_open(&hs, &back, &e), &e);
    float *lg = logits_of(back, ids);
    if (!bf16)
      CHECK(!memcmp(lg, trained, (size_t)B * T * V * sizeof(float)), "fp32 export: reloaded logits differ");
    py_check_hf_export(dir, tmp_path("engine-logits.safetensors"), ids, lg, B, T, V, NULL);
    printf("%s export of the stored checkpoint: reloaded%s, transformers agrees\n", bf16 ? "bf16 (sharded)" : "fp32",
           bf16 ? "" : " bit-identical");
    free(lg);
    eng_close(back);
  }
  free(trained);
  eng_close(r);
  es.close(es.ctx);
  store_close(st);
  tmp_cleanup();
  return 0;
}
