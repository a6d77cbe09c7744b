// A decoder layer under POET-X on the cpu (exec/layer.c with an
// eng_poet_layer) against transformers' own layer with its seven projections
// under the plain-PyTorch POET-X of tests/ref/gen_poet_fixtures.py (float64
// autograd): Llama, Qwen2 (q/k/v biases, frozen) and Qwen3 (q/k norms), each
// decoder layer on the input the reference gave it. Checked to 1e-4 relative:
// the layer's output; from the gradient the reference's output got, the
// input's gradient, dθ of both sides of all seven weights (non-square ones
// among them: k, v, gate, up, down), and the norms' gradients; and nothing
// lands in the frozen weights' or biases' gradients.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "exec/layer.h"
#include "fixture.h"
#include "model/hf_io.h"
#include "poet/state.h"
#include "route.h"

static const char *const proj[ENG_POET_WEIGHTS] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                                   "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                                   "mlp.down_proj"};
enum { BLOCK = 16 };

static double worst;

static void near(const char *model, int l, const char *what, const float *got, const float *ref, size_t n) {
  double rel = fx_rel(got, ref, n);
  if (rel > worst) worst = rel;
  CHECK(rel <= 1e-4, "%s layer %d: %s is %.3e off the reference (relative)", model, l, what, rel);
}

static float *ref_of(const eng_st_file *f, const char *fmt, int l, const char *p) {
  char name[256];
  snprintf(name, sizeof name, fmt, l, p);
  return fx_f32(f, name, NULL);
}

static void check_model(const char *model) {
  char path[1200];
  eng_err e = {0};
  eng_config c;
  int untied;
  CHECK_OK(eng_hf_load_config(NULL, fx_dir(model), &c, &untied, &e), &e);
  eng_layout lo;
  eng_layout_init(&lo, &c);
  float **shards = calloc((size_t)lo.n_shards, sizeof *shards);
  for (int s = 0; s < lo.n_shards; s++) shards[s] = calloc(eng_layout_shard_numel(&lo, s), sizeof(float));
  CHECK_OK(eng_hf_load_weights(NULL, fx_dir(model), &lo, shards, &e), &e);
  eng_st_file f;
  snprintf(path, sizeof path, "%s/%s.safetensors", fx_dir("poet_layers"), model);
  CHECK_OK(eng_st_open(&f, NULL, path, &e), &e);
  const eng_st_tensor *xt = eng_st_find(&f, "layer.0.x");
  CHECK(xt && xt->ndim == 3, "%s: no layer.0.x", path);
  const int B = (int)xt->shape[0], T = (int)xt->shape[1], n = B * T, d = c.d_model;
  const int qd = c.n_heads * c.head_dim, kvd = c.n_kv_heads * c.head_dim;

  float *acts_buf = malloc(eng_layer_acts_floats(&c, B, T) * sizeof(float));
  float *scratch_buf = malloc(eng_layer_scratch_floats(&c, B, T) * sizeof(float));
  eng_layer_acts a;
  eng_layer_scratch s;
  eng_layer_acts_bind(&a, acts_buf, &c, B, T);
  eng_layer_scratch_bind(&s, scratch_buf, &c, B, T);
  float *y = malloc(sizeof(float) * n * d), *dx = malloc(sizeof(float) * n * d);
  float *dw = malloc(lo.layer_numel * sizeof(float)), *cw = malloc(sizeof(float) * 6 * BLOCK * BLOCK);
  size_t tri = eng_poet_tri(BLOCK);

  for (int l = 0; l < c.n_layers; l++) {
    eng_poet_layer pl = {.b = BLOCK, .work = malloc(eng_poet_layer_work(d, c.d_ff, qd, kvd, BLOCK, n) * sizeof(float))};
    float *theta[ENG_POET_WEIGHTS][2];
    int32_t *perm[ENG_POET_WEIGHTS][2];
    for (int k = 0; k < ENG_POET_WEIGHTS; k++) {
      const eng_tensor *t = &lo.layer_proto[eng_poet_param[k]];
      int dims[2] = {t->cols, t->rows}; // in, out
      for (int side = 0; side < 2; side++) {
        char name[256];
        snprintf(name, sizeof name, "model.layers.%d.%s.%s", l, proj[k], side ? "theta_out" : "theta_in");
        theta[k][side] = fx_f32(&f, name, NULL);
        snprintf(name, sizeof name, "model.layers.%d.%s.%s", l, proj[k], side ? "pout" : "pin");
        perm[k][side] = fx_i32(&f, name, NULL);
        float *R = malloc(sizeof(float) * dims[side] * BLOCK), *dR = calloc((size_t)dims[side] * BLOCK, sizeof(float));
        eng_poet_cayley(dims[side] / BLOCK, BLOCK, theta[k][side], R, cw);
        if (side) pl.pout[k] = perm[k][side], pl.rout[k] = R, pl.drout[k] = dR;
        else pl.pin[k] = perm[k][side], pl.rin[k] = R, pl.drin[k] = dR;
      }
    }
    float *x = ref_of(&f, "layer.%d.x%s", l, ""), *dy = ref_of(&f, "layer.%d.dy%s", l, "");
    float *ref = ref_of(&f, "layer.%d.y%s", l, "");
    eng_layer_fwd(&c, &lo, shards[1 + l], x, y, NULL, B, T, &a, &pl);
    near(model, l, "output", y, ref, (size_t)n * d);
    free(ref);
    memset(dw, 0, lo.layer_numel * sizeof(float));
    eng_layer_bwd(&c, &lo, shards[1 + l], dw, x, &a, dy, dx, NULL, B, T, &s, &pl);
    ref = ref_of(&f, "layer.%d.dx%s", l, "");
    near(model, l, "input gradient", dx, ref, (size_t)n * d);
    free(ref);
    for (int k = 0; k < ENG_POET_WEIGHTS; k++) {
      const eng_tensor *t = &lo.layer_proto[eng_poet_param[k]];
      int dims[2] = {t->cols, t->rows};
      for (int side = 0; side < 2; side++) {
        float *dth = calloc(tri * (size_t)(dims[side] / BLOCK), sizeof(float));
        eng_poet_cayley_bwd(dims[side] / BLOCK, BLOCK, theta[k][side], side ? pl.drout[k] : pl.drin[k], dth, cw);
        char what[96];
        snprintf(what, sizeof what, "%s.%s", proj[k], side ? "theta_out" : "theta_in");
        ref = ref_of(&f, "grad.model.layers.%d.%s", l, what);
        near(model, l, what, dth, ref, tri * (size_t)(dims[side] / BLOCK));
        free(ref);
        free(dth);
        free(theta[k][side]);
        free(perm[k][side]);
      }
      free((void *)pl.rin[k]), free((void *)pl.rout[k]), free(pl.drin[k]), free(pl.drout[k]);
      // W0 is frozen: nothing lands in its gradient.
      for (size_t i = 0; i < t->numel; i++) CHECK(dw[t->off + i] == 0.0f, "%s layer %d: d%s is not zero", model, l, proj[k]);
    }
    const eng_layer_param biases[] = {ENG_P_BQ, ENG_P_BK, ENG_P_BV};
    for (int i = 0; i < 3; i++)
      for (size_t j = 0; j < lo.layer_proto[biases[i]].numel; j++)
        CHECK(dw[lo.layer_proto[biases[i]].off + j] == 0.0f, "%s layer %d: a frozen bias got a gradient", model, l);
    const struct { eng_layer_param p; const char *name; } norms[] = {
        {ENG_P_ATTN_NORM, "input_layernorm.weight"},
        {ENG_P_MLP_NORM, "post_attention_layernorm.weight"},
        {ENG_P_QNORM, "self_attn.q_norm.weight"},
        {ENG_P_KNORM, "self_attn.k_norm.weight"}};
    for (size_t i = 0; i < sizeof norms / sizeof norms[0]; i++) {
      const eng_tensor *t = &lo.layer_proto[norms[i].p];
      if (!t->numel) continue;
      ref = ref_of(&f, "grad.model.layers.%d.%s", l, norms[i].name);
      near(model, l, norms[i].name, dw + t->off, ref, t->numel);
      free(ref);
    }
    free(x), free(dy), free(pl.work);
    printf("%s layer %d: output, input gradient, dθ of 7 weights × 2 sides, norms' gradients within 1e-4\n", model, l);
  }
  eng_st_close(&f);
  for (int sh = 0; sh < lo.n_shards; sh++) free(shards[sh]);
  free(shards), free(acts_buf), free(scratch_buf), free(y), free(dx), free(dw), free(cw);
}

int main(void) {
  test_route_announce();
  for (int i = 0; i < FX_POET_MODELS; i++) check_model(fx_poet_models[i]);
  printf("largest relative difference %.2e\nok\n", worst);
  return 0;
}
