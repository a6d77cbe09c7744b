// Parity against Hugging Face transformers (fixtures from tests/ref):
// logits and every parameter gradient of Llama (tied), Llama 3.1 (its llama3
// RoPE, 64 positions past an original context of 32), Mistral (a head_dim of
// its own; and with a 24-key sliding window), Qwen2 (and with YaRN), Qwen3, a Qwen3
// whose config ties the head but whose file holds a head of its own
// (transformers loads it untied), Qwen3.5's hybrid (a Gated DeltaNet layer and
// a gated full-attention one) and another hybrid at odd shapes, saved in bf16,
// on packed rows of 100 tokens (qwen3_5_packed), and the text model of a
// Qwen3_5ForConditionalGeneration with a vision tower and MTP tensors, in
// shards (qwen3_5_vlm), to 1e-4 (both max|Δ|/max|ref|
// and |Δ|/|ref|), the loss to 1e-5 relative, and the losses of the fixture's
// AdamW steps (clipping, a warmup-cosine schedule) to 1e-5 relative.
#include <string.h>

#include "engine.h"
#include "fixture.h"
#include "route.h"

static const double TOL = 1e-4, LOSS_TOL = 1e-5;

static char note[4500]; // the last eng_open's note, "" when none

static void on_note(void *ctx, const char *line) {
  (void)ctx;
  snprintf(note, sizeof note, "%s", line);
}

// A run of the fixture's model on batches of its ref.safetensors' shape.
static void open_fixture(const char *name, const eng_st_file *f, eng_run **r) {
  const eng_st_tensor *ids = eng_st_find(f, "input_ids");
  CHECK(ids && ids->ndim == 2, "%s: input_ids is no [B, T] tensor", name);
  eng_spec s;
  eng_spec_defaults(&s);
  s.model_dir = fx_dir(name);
  s.note = on_note;
  note[0] = 0;
  s.batch = (int)ids->shape[0];
  s.seq_len = (int)ids->shape[1];
  s.device_cap = (size_t)64 << 20;
  // The fixture's schedule and optimizer (tests/fixtures/*/ref.json):
  // torch.optim.AdamW, so fp32 moments and fp32 gradients.
  s.optimizer = ENG_OPT_ADAMW;
  s.grad_dtype = ENG_GRAD_F32;
  s.lr = 1e-3f;
  s.min_lr = 1e-4f;
  s.warmup_steps = 3;
  s.total_steps = 10;
  s.beta1 = 0.9f;
  s.beta2 = 0.95f;
  s.eps = 1e-8f;
  s.weight_decay = 0.1f;
  s.clip = 0.5f;
  eng_err e = {0};
  CHECK_OK(eng_open(&s, r, &e), &e);
}

// The fixture's position ids (packed rows), or NULL when it has none.
static int32_t *fx_pos(const eng_st_file *f) {
  return eng_st_find(f, "pos") ? fx_i32(f, "pos", NULL) : NULL;
}

// |a - ref| / |ref| (L2), in double.
static double rel_l2(const float *a, const float *ref, size_t n) {
  double d = 0, r = 0;
  for (size_t i = 0; i < n; i++) {
    d += ((double)a[i] - ref[i]) * ((double)a[i] - ref[i]);
    r += (double)ref[i] * ref[i];
  }
  return r > 0 ? sqrt(d / r) : sqrt(d);
}

static void check_grads(const char *name) {
  eng_st_file f;
  fx_open(&f, name);
  size_t n_ids, n_logits;
  int32_t *ids = fx_i32(&f, "input_ids", &n_ids);
  int32_t *labels = fx_i32(&f, "labels", NULL);
  float *ref_logits = fx_f32(&f, "logits", &n_logits);
  float *ref_loss = fx_f32(&f, "loss", NULL);
  int32_t *pos = fx_pos(&f);

  eng_run *r;
  open_fixture(name, &f, &r);
  // Untied exactly where transformers unties, and said so.
  const int own_head = strcmp(name, "qwen3_tied_head") == 0;
  CHECK(!own_head == !*note, "%s: note \"%s\"", name, note);
  CHECK(!own_head || (strstr(note, fx_dir(name)) && strstr(note, "untied")), "note: %s", note);
  CHECK(!own_head || !eng_run_config(r)->tie_embeddings, "%s: the head stayed tied", name);
  eng_err e = {0};
  float *logits = malloc(n_logits * sizeof(float));
  double loss;
  CHECK_OK(eng_debug_grads(r, ids, labels, pos, &loss, logits, &e), &e);
  double rl = fx_rel(logits, ref_logits, n_logits);
  double rloss = fabs(loss - ref_loss[0]) / fabs(ref_loss[0]);
  printf("%-15s logits %.2e  loss %.2e (%.6f vs %.6f)\n", name, rl, rloss, loss, ref_loss[0]);
  CHECK(rl <= TOL, "%s: logits differ by %.3e", name, rl);
  CHECK(rloss <= LOSS_TOL, "%s: loss %.8f vs reference %.8f", name, loss, ref_loss[0]);

  int n_grads = 0;
  double worst = 0;
  for (int i = 0; i < f.n_tensors; i++) {
    const eng_st_tensor *t = &f.tensors[i];
    if (strncmp(t->name, "grad.", 5)) continue;
    float *ref = fx_f32(&f, t->name, NULL);
    float *got = malloc(t->numel * sizeof(float));
    CHECK_OK(eng_debug_param(r, t->name + 5, 'g', got, t->numel, &e), &e);
    double rel = fx_rel(got, ref, t->numel), rel2 = rel_l2(got, ref, t->numel);
    CHECK(rel <= TOL && rel2 <= TOL, "%s: gradient of %s differs by %.3e (max), %.3e (L2)", name, t->name + 5,
          rel, rel2);
    if (rel > worst) worst = rel;
    if (rel2 > worst) worst = rel2;
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
  free(pos);
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
  int32_t *pos = fx_pos(&f);
  eng_run *r;
  open_fixture(name, &f, &r);
  eng_err e = {0};
  double worst = 0;
  for (size_t s = 0; s < steps; s++) {
    eng_metrics m;
    CHECK_OK(eng_step_batch(r, ids, labels, pos, &m, &e), &e);
    double rel = fabs(m.loss - ref_losses[s]) / fabs(ref_losses[s]);
    double reln = fabs(m.grad_norm - ref_norms[s]) / fabs(ref_norms[s]);
    CHECK(rel <= LOSS_TOL, "%s: AdamW step %zu loss %.8f vs %.8f (%.2e)", name, s, m.loss, ref_losses[s], rel);
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
  free(pos);
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
  open_fixture("qwen3_bf16", &f, &r);
  eng_err e = {0};
  float *logits = malloc(n_logits * sizeof(float));
  double loss;
  CHECK_OK(eng_debug_grads(r, ids, ids, NULL, &loss, logits, &e), &e);
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
  const char *names[] = {"llama_tied", "llama31",         "mistral", "mistral_window", "qwen2",      "qwen2_yarn",
                         "qwen3",      "qwen3_tied_head", "qwen3_5", "qwen3_5_packed", "qwen3_5_vlm"};
  enum { N = sizeof names / sizeof names[0] };
  for (int i = 0; i < N; i++) check_grads(names[i]);
  for (int i = 0; i < N; i++) check_adamw(names[i]);
  check_bf16();
  printf("parity: ok\n");
  return 0;
}
