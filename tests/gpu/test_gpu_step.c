// One full training step through the cuda kernels against the transformers
// fixtures (tests/fixtures): embedding, every layer's forward
// (eng_cuda_layer_fwd), the final norm, the fused head and loss, the
// backward of the norm, every layer's backward (eng_cuda_layer_bwd) and the
// embedding's, with bf16 weights and activations and fp32 gradients, for
// Llama (tied embeddings), Qwen2 (q/k/v biases) and Qwen3 (q/k norms,
// head_dim 32). Logits, loss and every parameter gradient are compared with
// the fp32 reference as max|Δ|/max|ref|. The tolerances are multiples of
// bf16's epsilon: the weights are rounded by up to half an eps, and every
// activation again after each op of two layers. A host emulation of this
// storage scheme (the cpu kernels rounding to bf16 wherever the GPU stores
// bf16) gives, against these fixtures, logits within 0.93 eps, the loss
// within 0.002 eps and every gradient within 2.74 eps; the GPU adds bf16
// probabilities inside attention and other summation orders, so the bounds
// leave a margin of two to fifty.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef TRAIND_HAVE_CUDA
int main(void) {
  fprintf(stderr, "test_gpu_step: SKIP: this build has no CUDA backend\n");
  return 77;
}
#else

#include "gpu_fixture.h"
#include "gpu_test.h"

// Tolerances (BF16_EPS = 2^-7).
#define TOL_LOGITS (2 * BF16_EPS)
#define TOL_LOSS (0.1 * BF16_EPS)
#define TOL_GRAD (8 * BF16_EPS)

static eng_err err;
#define K_OK(call) CHECK_OK(call, &err)

// A host fp32 tensor as a device bf16 array.
static eng_bf16 *upload_bf16(const float *x, size_t n) {
  float *tmp = malloc(n * sizeof *tmp + 1);
  CHECK(tmp, "out of memory");
  memcpy(tmp, x, n * sizeof *tmp);
  uint16_t *h = bf16_round(tmp, n);
  eng_bf16 *d = dev_from(h, n * 2);
  free(tmp), free(h);
  return d;
}

// Copies every tensor of shard `s` from the checkpoint into an fp32 shard.
typedef struct fill_ctx {
  const gfx_file *model;
  int shard;
  float *dst;
} fill_ctx;

static int fill_tensor(void *arg, int shard, const eng_tensor *t) {
  fill_ctx *f = arg;
  if (shard != f->shard) return 0;
  size_t n;
  float *w = gfx_f32(f->model, t->name, &n);
  CHECK(n == t->numel, "%s has %zu values, the layout %zu", t->name, n, t->numel);
  memcpy(f->dst + t->off, w, n * sizeof *w);
  free(w);
  return 0;
}

static float *shard_f32(const gfx_file *model, const eng_layout *lo, int shard, size_t numel) {
  fill_ctx f = {model, shard, calloc(numel, sizeof(float))};
  CHECK(f.dst, "out of memory");
  eng_layout_visit(lo, fill_tensor, &f);
  return f.dst;
}

// Compares the device gradient of every tensor with the fixture's.
typedef struct cmp_ctx {
  const gfx_file *ref;
  const char *fixture;
  float **grads; // per shard, device fp32
  int n;
  double worst;
} cmp_ctx;

static int cmp_tensor(void *arg, int shard, const eng_tensor *t) {
  cmp_ctx *c = arg;
  char key[128];
  snprintf(key, sizeof key, "grad.%s", t->name);
  size_t nref;
  float *want = gfx_f32(c->ref, key, &nref), *got = dev_f32_to_host(c->grads[shard] + t->off, t->numel);
  CHECK(nref == t->numel, "%s: %s has %zu values, the layout %zu", c->fixture, key, nref, t->numel);
  double rel = rel_err_f(t->name, got, want, t->numel, TOL_GRAD);
  c->worst = rel > c->worst ? rel : c->worst;
  c->n++;
  free(want), free(got);
  return 0;
}

static void run_fixture(const char *name) {
  printf("%s\n", name);
  eng_config c;
  gfx_config(name, &c);
  K_OK(eng_cuda_check_config(&c, &err));
  eng_layout lo;
  eng_layout_init(&lo, &c);
  gfx_file model, ref;
  gfx_open(&model, gfx_path(name, "model.safetensors"));
  gfx_open(&ref, gfx_path(name, "ref.safetensors"));
  gfx_tensor ti;
  CHECK(gfx_find(&ref, "input_ids", &ti) && ti.ndim == 2, "%s: input_ids is not [B, T]", name);
  const int B = (int)ti.shape[0], T = (int)ti.shape[1], n = B * T;
  const int L = c.n_layers, d = c.d_model, V = c.vocab;
  size_t n_logits;
  int32_t *ids = gfx_i32(&ref, "input_ids", NULL), *labels = gfx_i32(&ref, "labels", NULL);
  float *ref_logits = gfx_f32(&ref, "logits", &n_logits), *ref_loss = gfx_f32(&ref, "loss", NULL);
  CHECK(n_logits == (size_t)n * V, "%s: logits are not [B, T, vocab]", name);

  // Targets as the executor makes them: position t predicts labels[t+1].
  int32_t *targets = malloc(n * sizeof *targets);
  int count = 0;
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      int32_t y = t + 1 < T ? labels[b * T + t + 1] : -1;
      targets[b * T + t] = y < 0 ? -1 : y;
      count += y >= 0;
    }

  cudaStream_t st;
  CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  eng_cuda_ctx *cx;
  K_OK(eng_cuda_ctx_open(&cx, st, &err));

  // Weights (bf16) and gradients (fp32) per shard; tied, the head's matrix
  // and its gradient are the embedding's.
  float *emb = shard_f32(&model, &lo, 0, lo.embed.numel);
  float *headw = shard_f32(&model, &lo, L + 1, lo.head_numel);
  eng_bf16 *d_emb = upload_bf16(emb, lo.embed.numel), *d_head = upload_bf16(headw, lo.head_numel);
  eng_bf16 *d_fnorm = d_head + lo.final_norm.off;
  const eng_bf16 *d_wmat = lo.lm_head.numel ? d_head + lo.lm_head.off : d_emb;
  float *g_emb = dev_alloc(lo.embed.numel * 4), *g_head = dev_alloc(lo.head_numel * 4);
  float *g_wmat = lo.lm_head.numel ? g_head + lo.lm_head.off : g_emb;
  eng_bf16 **d_layer = malloc(L * sizeof *d_layer);
  float **g_layer = malloc(L * sizeof *g_layer);
  for (int l = 0; l < L; l++) {
    float *w = shard_f32(&model, &lo, l + 1, lo.layer_numel);
    d_layer[l] = upload_bf16(w, lo.layer_numel);
    g_layer[l] = dev_alloc(lo.layer_numel * 4);
    free(w);
  }

  // Activations: every boundary and every layer's inside, kept.
  eng_bf16 *x = dev_alloc((size_t)(L + 1) * n * d * 2), *dxa = dev_alloc((size_t)n * d * 2);
  eng_bf16 *dxb = dev_alloc((size_t)n * d * 2), *hn = dev_alloc((size_t)n * d * 2), *dh = dev_alloc((size_t)n * d * 2);
  float *hrstd = dev_alloc(n * 4), *logits = dev_alloc((size_t)n * V * 4);
  double *loss_sum = dev_alloc(8);
  eng_cuda_layer_acts *acts = malloc(L * sizeof *acts);
  for (int l = 0; l < L; l++)
    eng_cuda_layer_acts_bind(&acts[l], dev_alloc(eng_cuda_layer_acts_bytes(&c, B, T)), &c, B, T);
  eng_cuda_layer_scratch scr;
  eng_cuda_layer_scratch_bind(&scr, dev_alloc(eng_cuda_layer_scratch_bytes(&c, B, T)), &c, B, T);
  void *hscratch = dev_alloc(eng_cuda_head_loss_scratch_bytes(V));
  int32_t *d_ids = dev_from(ids, n * 4), *d_targets = dev_from(targets, n * 4);

  // The step.
  K_OK(eng_cuda_embed_fwd(x, d_emb, d_ids, n, d, V, st, &err));
  for (int l = 0; l < L; l++)
    K_OK(eng_cuda_layer_fwd(cx, &c, &lo, d_layer[l], x + (size_t)l * n * d, x + (size_t)(l + 1) * n * d, NULL, B,
                            T, &acts[l], &err));
  const eng_bf16 *xl = x + (size_t)L * n * d;
  K_OK(eng_cuda_rmsnorm_fwd(hn, hrstd, xl, d_fnorm, n, d, c.rms_eps, st, &err));
  K_OK(eng_cuda_head_loss(cx, dh, g_wmat, logits, loss_sum, hn, d_wmat, d_targets, n, d, V, 1.0f / (float)count,
                          hscratch, &err));
  K_OK(eng_cuda_rmsnorm_bwd(cx, dxa, g_head + lo.final_norm.off, dh, xl, d_fnorm, hrstd, n, d, 0, &err));
  eng_bf16 *dy = dxa, *dx = dxb;
  for (int l = L - 1; l >= 0; l--) {
    K_OK(eng_cuda_layer_bwd(cx, &c, &lo, d_layer[l], g_layer[l], x + (size_t)l * n * d, &acts[l], dy, dx, NULL, B, T,
                            &scr, &err));
    eng_bf16 *t = dy;
    dy = dx, dx = t;
  }
  K_OK(eng_cuda_embed_bwd(g_emb, dy, d_ids, n, d, V, st, &err));
  K_OK(eng_cuda_stream_sync(st, &err));

  // Against the reference.
  double loss;
  host_from(&loss, loss_sum, 8);
  loss /= count;
  float *got_logits = dev_f32_to_host(logits, (size_t)n * V);
  double rloss = fabs(loss - ref_loss[0]) / fabs(ref_loss[0]);
  printf("  %-34s %.6f vs %.6f: rel %.2e (tol %.2e)\n", "loss (0.1 eps)", loss, ref_loss[0], rloss, TOL_LOSS);
  CHECK(rloss <= TOL_LOSS, "%s: loss %.8f vs reference %.8f", name, loss, ref_loss[0]);
  rel_err_f("logits (2 eps)", got_logits, ref_logits, (size_t)n * V, TOL_LOGITS);
  cmp_ctx cmp = {&ref, name, malloc((L + 2) * sizeof(float *)), 0, 0.0};
  cmp.grads[0] = g_emb, cmp.grads[L + 1] = g_head;
  for (int l = 0; l < L; l++) cmp.grads[l + 1] = g_layer[l];
  eng_layout_visit(&lo, cmp_tensor, &cmp);
  int n_grads = cmp.n;
  double worst = cmp.worst;
  free(cmp.grads);
  printf("  %d parameter gradients, worst %.2e (tol 8 eps = %.2e)\n", n_grads, worst, TOL_GRAD);
  CHECK(n_grads >= 20, "%s: only %d gradients compared", name, n_grads);

  eng_cuda_ctx_close(cx);
  cudaStreamDestroy(st);
  CUDA_OK(cudaDeviceReset()); // frees every buffer of this fixture at once
  gfx_close(&model), gfx_close(&ref);
  free(ids), free(labels), free(ref_logits), free(ref_loss), free(targets), free(emb), free(headw), free(d_layer);
  free(g_layer), free(acts), free(got_logits);
}

int main(void) {
  gpu_require("test_gpu_step");
  const char *names[] = {"llama_tied", "qwen2", "qwen3"};
  for (int i = 0; i < 3; i++) run_fixture(names[i]);
  printf("gpu step: ok\n");
  return 0;
}

#endif
