// Bad input to the engine's API gets a clear error naming what is wrong, never
// a crash: spec fields, a plan made for another job, the device, model
// directories, token ids outside the vocabulary.
#define _XOPEN_SOURCE 700
#include <math.h>
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

static size_t device_bytes(const eng_spec *s) {
  eng_err e = {0};
  size_t n;
  CHECK_OK(eng_spec_device_bytes(s, &n, &e), &e);
  return n;
}

// eng_spec.plan: a plan made for another job is refused naming the field
// that differs; a plan that keeps only boundary 0 (the backward recomputes
// the rest) sizes as the uniform policy that does the same and trains.
static void plans(const eng_spec *base) {
  const int L = base->config.n_layers;
  eng_err e = {0};
  eng_plan p, other;
  CHECK_OK(eng_plan_init(&other, L + 1, &e), &e);
  CHECK_OK(eng_plan_init(&p, L, &e), &e);
  p.batch = p.micro_batch = base->batch, p.n_micro = 1, p.seq_len = base->seq_len;
  p.bnd_bytes = (uint64_t)base->batch * base->seq_len * base->config.d_model * sizeof(float); // the cpu's
  p.row_bytes = (uint64_t)base->config.d_model * sizeof(float);
  other.batch = p.batch, other.micro_batch = p.micro_batch, other.n_micro = 1, other.seq_len = p.seq_len;
  eng_spec s = *base;
  s.plan = &other;
  expect(&s, ENG_EINVAL, "n_layers is 3, the model has 2 layers");
  s.plan = &p;
  p.batch = p.micro_batch = 2 * base->batch;
  expect(&s, ENG_EINVAL, "batch is 8, the spec's batch is 4");
  p.batch = p.micro_batch = base->batch, p.seq_len = base->seq_len / 2;
  expect(&s, ENG_EINVAL, "seq_len is 32, the spec's seq_len is 64");
  p.seq_len = base->seq_len, p.micro_batch = 3;
  expect(&s, ENG_EINVAL, "not n_micro 1 micro-batches of micro_batch 3");
  p.micro_batch = base->batch / 2, p.n_micro = 2;
  expect(&s, ENG_EINVAL, "n_micro is 2, the spec's micro_batches is 1");
  s.micro_batches = 3; // the plan's message, not the spec's split
  expect(&s, ENG_EINVAL, "the spec's micro_batches is 3");
  s.micro_batches = 1, p.micro_batch = base->batch, p.n_micro = 1;
  p.bnd[0].materialised = 0;
  expect(&s, ENG_EINVAL, "boundary 0");
  p.bnd[0].materialised = 1;

  eng_spec u = *base;
  u.ckpt_every = 0;
  CHECK(device_bytes(&s) == device_bytes(&u), "the plan sizes %zu bytes, the uniform policy %zu", device_bytes(&s),
        device_bytes(&u));
  eng_run *r;
  CHECK_OK(eng_open(&s, &r, &e), &e);
  eng_plan_free(&p); // the run keeps nothing of it
  eng_plan_free(&other);
  eng_metrics m;
  CHECK_OK(eng_step(r, &m, &e), &e);
  CHECK(isfinite(m.loss), "a step under the plan: loss %g", m.loss);
  printf("a plan recomputing every boundary but 0 sizes as the uniform policy (%zu bytes) and trains: loss %.4f\n",
         device_bytes(&u), m.loss);
  eng_close(r);
}

int main(void) {
  tmp_make();
  eng_spec base, s;
  tiny_spec(&base, 2);
  plans(&base);

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
  s = base, s.eval_every = 5;
  expect(&s, ENG_EINVAL, "eval_path");
  s = base, s.config.n_kv_heads = 3;
  expect(&s, ENG_EINVAL, "heads");
  s = base, s.config.d_model = 0;
  expect(&s, ENG_EINVAL, "spec");
  s = base, eng_arch_apply(&s.config, ENG_ARCH_QWEN3_5), s.config.full_every = 2, s.config.dn.k_heads = 2, s.config.dn.v_heads = 2, s.config.dn.k_dim = 8,
  s.config.dn.v_dim = 8, s.config.dn.conv = 4;
  s.method = ENG_METHOD_POETX, s.poet_block = 4;
  expect(&s, ENG_ENOTSUP, "method poetx does not cover Gated DeltaNet");
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
  CHECK(eng_step_batch(r, ids, labels, NULL, NULL, &e) == ENG_EINVAL && strstr(e.msg, "256"), "%s", e.msg);
  printf("refused: %s\n", e.msg);
  ids[7] = 1;
  labels[9] = -5;
  CHECK(eng_step_batch(r, ids, labels, NULL, NULL, &e) == ENG_EINVAL && strstr(e.msg, "-5"), "%s", e.msg);
  printf("refused: %s\n", e.msg);
  // The run is still usable after refusals.
  labels[9] = 1;
  CHECK_OK(eng_step_batch(r, ids, labels, NULL, NULL, &e), &e);
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
