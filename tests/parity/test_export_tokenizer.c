// An export is a model users can prompt: a model opened from a directory
// with a tokenizer (fixture llama_tok: a byte-level BPE tokenizer.json, its
// tokenizer_config.json and chat_template.jinja, generation_config.json,
// and bos/pad ids with a list of eos ids in config.json) trains two steps
// and is exported by the engine (fp32) and from the store's checkpoint
// (bf16). tests/ref/check_export_tokenizer.py then checks each export with
// TRAIND_PYTHON: the files came along byte for byte, the token ids are the
// source's, and transformers' AutoTokenizer and AutoModelForCausalLM load it
// and generate greedily. Without python, torch or transformers this test
// fails: it is never skipped.
#define _XOPEN_SOURCE 700
#include <stdlib.h>

#include "engine.h"
#include "fixture.h"
#include "python.h"
#include "storage/store.h"
#include "unit/tmpdir.h"

enum { B = 2, T = 32 };

int main(void) {
  tmp_make();
  const char *source = fx_dir("llama_tok");
  eng_run *r = fx_run_open(source, B, T);
  eng_err e = {0};
  const int V = eng_run_config(r)->vocab;
  int32_t ids[B * T];
  for (int i = 0; i < B * T; i++) ids[i] = (int32_t)((i * 37 + 11) % V);
  for (int i = 0; i < 2; i++) CHECK_OK(eng_step_batch(r, ids, ids, NULL, NULL, &e), &e);

  const char *engine_dir = tmp_path("engine-export");
  CHECK_OK(eng_export_hf(r, engine_dir, 0, &e), &e);
  py_check_export_tokenizer(engine_dir, source);

  store *st;
  CHECK_OK(store_open(&st, tmp_path("db"), NULL, &e), &e);
  eng_store es;
  CHECK_OK(store_engine_open(&es, st, "tok", 0, &e), &e);
  CHECK_OK(eng_save(r, &es, &e), &e);
  const char *store_dir = tmp_path("store-export");
  CHECK_OK(store_ckpt_export_hf(st, "tok", -1, eng_run_config(r), store_dir, 1, 0, NULL, source, &e), &e);
  py_check_export_tokenizer(store_dir, source);

  es.close(es.ctx);
  store_close(st);
  eng_close(r);
  tmp_cleanup();
  printf("test_export_tokenizer: ok\n");
  return 0;
}
