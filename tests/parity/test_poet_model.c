// POET-X through the whole engine (method poetx, the layer-streaming
// executor on the cpu backend) against transformers' Llama (tied), Qwen2 and
// Qwen3 with every decoder projection under the plain-PyTorch POET-X of
// tests/ref/gen_poet_fixtures.py (float64 autograd; block 16, the fixture's
// θ and permutations set into the run): the loss, and the gradients of every
// θ (both sides of all seven weights of every layer), of the norms, the
// embedding and the head, to 1e-4 relative. Run under a policy that
// recomputes (checkpoints every other layer, two micro-batches), so the
// rotations' cache and the per-layer gradient finishing are exercised.
// Then 10 training steps from that state, merging every 5 updates (the
// reference draws the new permutations as the engine does): the losses
// agree to 1e-4 relative, the steps after the merge included.
#include <string.h>

#include "engine.h"
#include "fixture.h"
#include "route.h"

static double worst;

// The reference's θ and permutations into run r; how many tensors.
static int poet_set(eng_run *r, const eng_st_file *poet) {
  eng_err e = {0};
  int n = 0;
  for (int i = 0; i < poet->n_tensors; i++) {
    const eng_st_tensor *t = &poet->tensors[i];
    if (strncmp(t->name, "model.layers.", 13)) continue;
    void *v = t->dtype == ENG_ST_I32 ? (void *)fx_i32(poet, t->name, NULL) : (void *)fx_f32(poet, t->name, NULL);
    CHECK_OK(eng_debug_poet_set(r, t->name, v, t->numel, &e), &e);
    free(v);
    n++;
  }
  return n;
}

static void check_model(const char *model) {
  char path[1200];
  eng_err e = {0};
  eng_st_file ref, poet;
  fx_open(&ref, model);
  snprintf(path, sizeof path, "%s/%s.safetensors", fx_dir("poet_layers"), model);
  CHECK_OK(eng_st_open(&poet, NULL, path, &e), &e);
  size_t n_ids;
  int32_t *ids = fx_i32(&ref, "input_ids", &n_ids), *labels = fx_i32(&ref, "labels", NULL);
  const eng_st_tensor *it = eng_st_find(&ref, "input_ids");

  eng_spec s;
  eng_spec_defaults(&s);
  s.model_dir = fx_dir(model);
  s.batch = (int)it->shape[0];
  s.seq_len = (int)it->shape[1];
  s.micro_batches = 2;
  s.ckpt_every = 2;
  s.device_cap = (size_t)64 << 20;
  s.optimizer = ENG_OPT_ADAMW;
  s.grad_dtype = ENG_GRAD_F32;
  s.method = ENG_METHOD_POETX;
  s.poet_block = 16;
  eng_run *r;
  CHECK_OK(eng_open(&s, &r, &e), &e);

  int n_set = poet_set(r, &poet);
  CHECK(n_set == eng_run_config(r)->n_layers * 7 * 4, "%s: %d POET-X tensors in the fixture", model, n_set);

  double loss;
  CHECK_OK(eng_debug_grads(r, ids, labels, NULL, &loss, NULL, &e), &e);
  float *ref_loss = fx_f32(&poet, "loss", NULL);
  double rl = fabs(loss - ref_loss[0]) / fabs(ref_loss[0]);
  CHECK(rl <= 1e-4, "%s: loss %.8f, the reference's %.8f", model, loss, ref_loss[0]);
  int n_grads = 0;
  for (int i = 0; i < poet.n_tensors; i++) {
    const eng_st_tensor *t = &poet.tensors[i];
    if (strncmp(t->name, "grad.", 5)) continue;
    float *want = fx_f32(&poet, t->name, NULL), *got = malloc(t->numel * sizeof(float));
    CHECK_OK(eng_debug_param(r, t->name + 5, 'g', got, t->numel, &e), &e);
    double d = fx_rel(got, want, t->numel);
    if (d > worst) worst = d;
    CHECK(d <= 1e-4, "%s: %s is %.3e off the reference (relative)", model, t->name, d);
    free(want), free(got);
    n_grads++;
  }
  printf("%-10s loss %.6f (reference %.6f, %.1e), %d gradients within 1e-4\n", model, loss, ref_loss[0], rl, n_grads);
  eng_close(r);

  // The trajectory (tests/ref/gen_poet_fixtures.py's TRAJ).
  s.seed = 77;
  s.poet_merge_every = 5;
  s.poet_lr = 2e-3f;
  s.lr = 1e-3f;
  s.min_lr = 1e-4f;
  s.warmup_steps = 3;
  s.total_steps = 10;
  s.beta1 = 0.9f;
  s.beta2 = 0.95f;
  s.eps = 1e-8f;
  s.weight_decay = 0.1f;
  s.clip = 0.5f;
  CHECK_OK(eng_open(&s, &r, &e), &e);
  poet_set(r, &poet);
  size_t n_traj;
  float *traj = fx_f32(&poet, "traj.losses", &n_traj);
  double tworst = 0;
  for (size_t i = 0; i < n_traj; i++) {
    eng_metrics m;
    CHECK_OK(eng_step_batch(r, ids, labels, NULL, &m, &e), &e);
    double d = fabs(m.loss - traj[i]) / fabs(traj[i]);
    if (d > tworst) tworst = d;
    CHECK(d <= 1e-4, "%s: step %zu's loss %.8f, the reference's %.8f", model, i + 1, m.loss, traj[i]);
    if (i + 1 == n_traj) printf("%-10s %zu steps with merges after updates 5 and 10: losses %.4f -> %.4f within %.1e\n",
                                model, n_traj, traj[0], m.loss, tworst);
  }
  if (tworst > worst) worst = tworst;
  free(traj);
  free(ref_loss), free(ids), free(labels);
  eng_close(r);
  eng_st_close(&ref);
  eng_st_close(&poet);
}

int main(void) {
  test_route_announce();
  for (int i = 0; i < FX_POET_MODELS; i++) check_model(fx_poet_models[i]);
  printf("largest relative difference %.2e\nok\n", worst);
  return 0;
}
