// Bad input to the engine's API gets a clear error naming what is wrong, never
// a crash: spec fields, the device, model directories, token ids outside the
// vocabulary.
#define _XOPEN_SOURCE 700
#include <string.h>

#include "check.h"
#include "tiny.h"
#include "unit/tmpdir.h"

static void expect(const eng_spec *s, int code, const char *needle) {
  eng_err e = {0};
  eng_run *r = NULL;
  int rc = eng_open(s, &r, &e);
  CHECK(rc == code && r == NULL, "expected %d (%s), got %d: %s", code, needle, rc, e.msg);
  CHECK(strstr(e.msg, needle), "message \"%s\" does not mention \"%s\"", e.msg, needle);
  printf("refused: %s\n", e.msg);
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  CHECK(f, "cannot write %s", path);
  fputs(text, f);
  fclose(f);
}

int main(void) {
  tmp_make();
  eng_spec base, s;
  tiny_spec(&base, 2);

  s = base, s.micro_batches = 3;
  expect(&s, ENG_EINVAL, "micro_batches");
  s = base, s.seq_len = 0;
  expect(&s, ENG_EINVAL, "seq_len");
  s = base, s.batch = -1;
  expect(&s, ENG_EINVAL, "batch");
  s = base, s.beta2 = 1.0f;
  expect(&s, ENG_EINVAL, "beta");
  s = base, s.eps = 0;
  expect(&s, ENG_EINVAL, "eps");
  eng_place no_first[2] = {ENG_PLACE_NONE, ENG_PLACE_DEVICE};
  s = base, s.plan_place = no_first;
  expect(&s, ENG_EINVAL, "boundary 0");
  s = base, s.eval_every = 5;
  expect(&s, ENG_EINVAL, "eval_path");
  s = base, s.config.n_kv_heads = 3;
  expect(&s, ENG_EINVAL, "heads");
  s = base, s.config.d_model = 0;
  expect(&s, ENG_EINVAL, "spec");
  s = base, s.device_cap = 4096;
  expect(&s, ENG_ECAP, "bytes");
  s = base, s.train_path = tmp_path("missing.txt");
  expect(&s, ENG_EIO, "missing.txt");

  // A GPU the engine cannot train on (no CUDA in this build, no driver, or an
  // index past the GPUs there are) is refused naming the field; sizing a GPU
  // spec needs no GPU, and no cuda backend in the build either (the cuda
  // kernels' buffer layouts are plain C, kernels/cuda/layout.c).
  eng_err ge = {0};
  int gpus = eng_gpu_count(&ge);
  s = base, s.device_gpu = gpus > 0 ? gpus : 0;
  expect(&s, gpus > 0 ? ENG_EINVAL : ENG_EDEVICE, "device_gpu");
  s = base, s.device_gpu = -2;
  expect(&s, ENG_EINVAL, "device_gpu");
  size_t gpu_bytes;
  s = base, s.device_gpu = 0;
  CHECK_OK(eng_spec_device_bytes(&s, &gpu_bytes, &ge), &ge);
  printf("a GPU spec needs %zu bytes of arena\n", gpu_bytes);

  // A model directory without config.json, and one naming an unknown architecture.
  s = base, s.model_dir = tmp_root;
  expect(&s, ENG_EIO, "config.json");
  write_text(tmp_path("config.json"),
             "{\"architectures\": [\"GPT2LMHeadModel\"], \"model_type\": \"gpt2\", \"vocab_size\": 256,"
             " \"hidden_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
             " \"intermediate_size\": 128}");
  expect(&s, ENG_ENOTSUP, "\"model_type\" is not one of"); // named, not quoted from the file
  // A valid config whose weights file is missing.
  write_text(tmp_path("config.json"),
             "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"vocab_size\": 256,"
             " \"hidden_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
             " \"intermediate_size\": 128}");
  expect(&s, ENG_EIO, "model.safetensors");

  // Token ids outside the vocabulary in a caller's batch.
  eng_err e = {0};
  eng_run *r;
  CHECK_OK(eng_open(&base, &r, &e), &e);
  size_t n = (size_t)base.batch * base.seq_len;
  int32_t ids[n], labels[n];
  for (size_t i = 0; i < n; i++) ids[i] = labels[i] = (int32_t)(i % 256);
  ids[7] = 256;
  CHECK(eng_step_batch(r, ids, labels, NULL, &e) == ENG_EINVAL && strstr(e.msg, "256"), "%s", e.msg);
  printf("refused: %s\n", e.msg);
  ids[7] = 1;
  labels[9] = -5;
  CHECK(eng_step_batch(r, ids, labels, NULL, &e) == ENG_EINVAL && strstr(e.msg, "-5"), "%s", e.msg);
  printf("refused: %s\n", e.msg);
  // The run is still usable after refusals.
  labels[9] = 1;
  CHECK_OK(eng_step_batch(r, ids, labels, NULL, &e), &e);
  eng_close(r);

  // Cancellation: the flag is polled per layer; the step stops with
  // ENG_ECANCEL and the run can go on once the flag is lowered.
  volatile int cancel = 1;
  s = base, s.cancel = &cancel;
  CHECK_OK(eng_open(&s, &r, &e), &e);
  CHECK(eng_step(r, NULL, &e) == ENG_ECANCEL, "a raised cancel flag did not stop the step: %s", e.msg);
  CHECK(eng_steps_done(r) == 0, "a cancelled step counted");
  printf("cancelled: %s\n", e.msg);
  cancel = 0;
  CHECK_OK(eng_step(r, NULL, &e), &e);
  CHECK(eng_steps_done(r) == 1, "the run did not resume after a cancel");
  eng_close(r);
  tmp_cleanup();
  return 0;
}
