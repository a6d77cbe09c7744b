// Parity against Hugging Face transformers (fixtures from tests/ref):
// logits, loss and every parameter gradient of Llama (tied), Qwen2, Qwen3, a
// Qwen3 whose config ties the head but whose file holds a head of its own
// (transformers loads it untied) and Qwen3.5's hybrid (a Gated DeltaNet layer
// and a gated full-attention one) to 1e-4 (max|Δ|/max|ref|), and the losses of
// 10 AdamW steps with clipping and a warmup-cosine schedule to 1e-4 relative.
#include <string.h>

#include "engine.h"
#include "fixture.h"
#include "route.h"

static const double TOL = 1e-4;

static char note[4500]; // the last eng_open's note, "" when none

static void on_note(void *ctx, const char *line) {
  (void)ctx;
  snprintf(note, sizeof note, "%s", line);
}

static void open_fixture(const char *name, int steps, eng_run **r) {
  eng_spec s;
  eng_spec_defaults(&s);
  s.model_dir = fx_dir(name);
  s.note = on_note;
  note[0] = 0;
  s.batch = 2;
  s.seq_len = 64;
  s.device_cap = (size_t)64 << 20;
  // The fixture's schedule and optimizer (tests/fixtures/*/ref.json):
  // torch.optim.AdamW, so fp32 moments and fp32 gradients.
  s.optimizer = ENG_OPT_ADAMW;
  s.grad_dtype = ENG_GRAD_F32;
  s.lr = 1e-3f;
  s.min_lr = 1e-4f;
  s.warmup_steps = 3;
  s.total_steps = steps;
  s.beta1 = 0.9f;
  s.beta2 = 0.95f;
  s.eps = 1e-8f;
  s.weight_decay = 0.1f;
  s.clip = 0.5f;
  eng_err e = {0};
  CHECK_OK(eng_open(&s, r, &e), &e);
}

static void check_grads(const char *name) {
  eng_st_file f;
  fx_open(&f, name);
  size_t n_ids, n_logits;
  int32_t *ids = fx_i32(&f, "input_ids", &n_ids);
  int32_t *labels = fx_i32(&f, "labels", NULL);
  float *ref_logits = fx_f32(&f, "logits", &n_logits);
  float *ref_loss = fx_f32(&f, "loss", NULL);

  eng_run *r;
  open_fixture(name, 10, &r);
  // Untied exactly where transformers unties, and said so.
  const int own_head = strcmp(name, "qwen3_tied_head") == 0;
  CHECK(!own_head == !*note, "%s: note \"%s\"", name, note);
  CHECK(!own_head || (strstr(note, fx_dir(name)) && strstr(note, "untied")), "note: %s", note);
  CHECK(!own_head || !eng_run_config(r)->tie_embeddings, "%s: the head stayed tied", name);
  eng_err e = {0};
  float *logits = malloc(n_logits * sizeof(float));
  double loss;
  CHECK_OK(eng_debug_grads(r, ids, labels, &loss, logits, &e), &e);
  double rl = fx_rel(logits, ref_logits, n_logits);
  double rloss = fabs(loss - ref_loss[0]) / fabs(ref_loss[0]);
  printf("%-15s logits %.2e  loss %.2e (%.6f vs %.6f)\n", name, rl, rloss, loss, ref_loss[0]);
  CHECK(rl <= TOL, "%s: logits differ by %.3e", name, rl);
  CHECK(rloss <= TOL, "%s: loss %.8f vs reference %.8f", name, loss, ref_loss[0]);

  int n_grads = 0;
  double worst = 0;
  for (int i = 0; i < f.n_tensors; i++) {
    const eng_st_tensor *t = &f.tensors[i];
    if (strncmp(t->name, "grad.", 5)) continue;
    float *ref = fx_f32(&f, t->name, NULL);
    float *got = malloc(t->numel * sizeof(float));
    CHECK_OK(eng_debug_param(r, t->name + 5, 'g', got, t->numel, &e), &e);
    double rel = fx_rel(got, ref, t->numel);
    CHECK(rel <= TOL, "%s: gradient of %s differs by %.3e", name, t->name + 5, rel);
    if (rel > worst) worst = rel;
    n_grads++;
    free(ref);
    free(got);
  }
  printf("%-15s %d parameter gradients, worst %.2e\n", name, n_grads, worst);
  CHECK(n_grads >= 20, "%s: only %d gradients in the fixture", name, n_grads);
  eng_close(r);
  free(ids);
  free(labels);
  free(ref_logits);
  free(ref_loss);
  free(logits);
  eng_st_close(&f);
}

static void check_adamw(const char *name) {
  eng_st_file f;
  fx_open(&f, name);
  size_t steps;
  int32_t *ids = fx_i32(&f, "input_ids", NULL);
  int32_t *labels = fx_i32(&f, "labels", NULL);
  float *ref_losses = fx_f32(&f, "adamw.losses", &steps);
  float *ref_norms = fx_f32(&f, "adamw.grad_norms", NULL);
  eng_run *r;
  open_fixture(name, (int)steps, &r);
  eng_err e = {0};
  double worst = 0;
  for (size_t s = 0; s < steps; s++) {
    eng_metrics m;
    CHECK_OK(eng_step_batch(r, ids, labels, &m, &e), &e);
    double rel = fabs(m.loss - ref_losses[s]) / fabs(ref_losses[s]);
    double reln = fabs(m.grad_norm - ref_norms[s]) / fabs(ref_norms[s]);
    CHECK(rel <= TOL, "%s: AdamW step %zu loss %.8f vs %.8f (%.2e)", name, s, m.loss, ref_losses[s], rel);
    CHECK(reln <= TOL, "%s: step %zu gradient norm %.8f vs %.8f", name, s, m.grad_norm, ref_norms[s]);
    if (rel > worst) worst = rel;
  }
  printf("%-15s %zu AdamW steps: losses %.4f -> %.4f, worst relative difference %.2e\n", name, steps,
         ref_losses[0], ref_losses[steps - 1], worst);
  eng_close(r);
  free(ids);
  free(labels);
  free(ref_losses);
  free(ref_norms);
  eng_st_close(&f);
}

// A model transformers saved in bf16 loads and gives the fp32 forward of the
// bf16-rounded weights.
static void check_bf16(void) {
  eng_st_file f;
  fx_open(&f, "qwen3_bf16");
  size_t n_logits;
  int32_t *ids = fx_i32(&f, "input_ids", NULL);
  float *ref = fx_f32(&f, "logits", &n_logits);
  eng_run *r;
  open_fixture("qwen3_bf16", 10, &r);
  eng_err e = {0};
  float *logits = malloc(n_logits * sizeof(float));
  double loss;
  CHECK_OK(eng_debug_grads(r, ids, ids, &loss, logits, &e), &e);
  double rl = fx_rel(logits, ref, n_logits);
  printf("qwen3_bf16 logits %.2e\n", rl);
  CHECK(rl <= TOL, "bf16 checkpoint: logits differ by %.3e", rl);
  eng_close(r);
  free(ids);
  free(ref);
  free(logits);
  eng_st_close(&f);
}

int main(void) {
  test_route_announce();
  const char *names[] = {"llama_tied", "qwen2", "qwen3", "qwen3_tied_head", "qwen3_5"};
  for (int i = 0; i < 5; i++) check_grads(names[i]);
  for (int i = 0; i < 5; i++) check_adamw(names[i]);
  check_bf16();
  printf("parity: ok\n");
  return 0;
}
