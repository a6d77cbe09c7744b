// Qwen3.5's two decoder layers on the cpu against transformers'
// Qwen3_5DecoderLayer (tests/ref/gen_hybrid_fixtures.py): the Gated DeltaNet
// layer (exec/layer_dn.h, linear_attention) and the gated full-attention
// layer (exec/layer.h with attn_gate, norm_plus_one and partial RoPE):
// output, input gradient and every parameter's gradient, on a packed row and
// an unpacked one of 150 tokens. Then the bits: y and dx the same with a
// call per row (micro-batches), y, dx and dw the same with one thread.
#include <omp.h>
#include <string.h>

#include "check.h"
#include "exec/layer.h"
#include "exec/layer_dn.h"
#include "fixture.h"

enum { B = 2, T = 150 };

typedef struct run {
  float *y, *dx, *dw;
} run;

// One of the two layers: lo non-NULL, the attention layer of that layout;
// else the DN layer of proto.
typedef struct layer {
  const eng_config *c;
  const eng_layout *lo;
  const eng_tensor *proto;
  size_t numel;
} layer;

static run layer_run(const layer *L, const float *w, const float *x, const float *dy, const int32_t *pos,
                     int rows_per_call) {
  const eng_config *c = L->c;
  const size_t d = (size_t)c->d_model;
  run r = {malloc(B * T * d * 4), malloc(B * T * d * 4), calloc(L->numel, 4)};
  for (int b0 = 0; b0 < B; b0 += rows_per_call) {
    const size_t o = (size_t)b0 * T;
    const int nb = rows_per_call;
    float *abuf, *sbuf;
    if (L->lo) {
      eng_layer_acts a;
      eng_layer_scratch s;
      abuf = malloc(eng_layer_acts_floats(c, nb, T) * 4), sbuf = malloc(eng_layer_scratch_floats(c, nb, T) * 4);
      eng_layer_acts_bind(&a, abuf, c, nb, T);
      eng_layer_scratch_bind(&s, sbuf, c, nb, T);
      eng_layer_fwd(c, L->lo, w, x + o * d, r.y + o * d, pos + o, nb, T, &a, NULL);
      eng_layer_bwd(c, L->lo, w, r.dw, x + o * d, &a, dy + o * d, r.dx + o * d, pos + o, nb, T, &s, NULL);
    } else {
      eng_dn_acts a;
      eng_dn_scratch s;
      abuf = malloc(eng_dn_acts_floats(c, nb, T) * 4), sbuf = malloc(eng_dn_scratch_floats(c, nb, T) * 4);
      eng_dn_acts_bind(&a, abuf, c, nb, T);
      eng_dn_scratch_bind(&s, sbuf, c, nb, T);
      eng_dn_layer_fwd(c, L->proto, w, x + o * d, r.y + o * d, pos + o, nb, T, &a);
      eng_dn_layer_bwd(c, L->proto, w, r.dw, x + o * d, &a, dy + o * d, r.dx + o * d, pos + o, nb, T, &s);
    }
    free(abuf), free(sbuf);
  }
  return r;
}

// The layer against the fixture's tensors under prefix ("dn." or "ga.").
static void check_layer(const eng_st_file *f, const char *prefix, const layer *L, const int32_t *pos) {
  const eng_tensor *proto = L->lo ? L->lo->layer_proto : L->proto;
  const size_t skip = strlen("model.layers.0."), numel = L->numel;
  // The layer's shard from the fixture's weights, each by its name.
  float *w = calloc(numel, 4);
  int found = 0, want;
  char name[160];
  snprintf(name, sizeof name, "%sw.", prefix);
  want = 0;
  for (int i = 0; i < f->n_tensors; i++) want += strncmp(f->tensors[i].name, name, strlen(name)) == 0;
  for (int p = 0; p < ENG_P_LAYER_COUNT; p++) {
    if (!proto[p].numel) continue;
    snprintf(name, sizeof name, "%sw.%s", prefix, proto[p].name + skip);
    size_t m;
    float *t = fx_f32(f, name, &m);
    CHECK(m == proto[p].numel, "%s: %zu floats, the layout has %zu", name, m, proto[p].numel);
    memcpy(w + proto[p].off, t, m * 4);
    free(t);
    found++;
  }
  CHECK(found == want, "%s: the layout has %d tensors, transformers' layer %d", prefix, found, want);

  size_t nx;
  snprintf(name, sizeof name, "%sx", prefix);
  float *x = fx_f32(f, name, &nx);
  snprintf(name, sizeof name, "%sdy", prefix);
  float *dy = fx_f32(f, name, NULL);
  CHECK(nx == (size_t)B * T * L->c->d_model, "%sx has %zu floats", prefix, nx);
  run r = layer_run(L, w, x, dy, pos, B);

  const struct {
    const char *what;
    const float *got;
  } io[] = {{"y", r.y}, {"dx", r.dx}};
  for (int i = 0; i < 2; i++) {
    snprintf(name, sizeof name, "%s%s", prefix, io[i].what);
    float *ref = fx_f32(f, name, NULL);
    double rel = fx_rel(io[i].got, ref, nx);
    printf("%-42s %.3g\n", name, rel);
    CHECK(rel < 1e-5, "%s differs from transformers by %.3g", name, rel);
    free(ref);
  }
  for (int p = 0; p < ENG_P_LAYER_COUNT; p++) {
    if (!proto[p].numel) continue;
    snprintf(name, sizeof name, "%sgrad.%s", prefix, proto[p].name + skip);
    float *ref = fx_f32(f, name, NULL);
    double rel = fx_rel(r.dw + proto[p].off, ref, proto[p].numel);
    printf("%-42s %.3g\n", name, rel);
    CHECK(rel < 1e-4, "%s differs from transformers by %.3g", name, rel);
    free(ref);
  }

  // y and dx do not depend on the rows per call; nothing on the thread count.
  run per_row = layer_run(L, w, x, dy, pos, 1);
  CHECK(!memcmp(per_row.y, r.y, nx * 4) && !memcmp(per_row.dx, r.dx, nx * 4), "%s: a call per row changes y or dx",
        prefix);
  int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  run one = layer_run(L, w, x, dy, pos, B);
  omp_set_num_threads(threads);
  CHECK(!memcmp(one.y, r.y, nx * 4) && !memcmp(one.dx, r.dx, nx * 4) && !memcmp(one.dw, r.dw, numel * 4),
        "%s: one thread changes y, dx or dw", prefix);
  run *all[] = {&r, &per_row, &one};
  for (int i = 0; i < 3; i++) free(all[i]->y), free(all[i]->dx), free(all[i]->dw);
  free(w), free(x), free(dy);
}

int main(void) {
  eng_st_file f;
  fx_open(&f, "hybrid_blocks");
  int32_t *pos = fx_i32(&f, "pos", NULL);

  // Gated DeltaNet: hidden 40, 2 key heads of 6, 4 value heads of 10, conv 4.
  eng_config dn = {.d_model = 40, .d_ff = 56, .rms_eps = 1e-6f, .dn = {2, 4, 6, 10, 4}};
  eng_tensor proto[ENG_P_LAYER_COUNT];
  layer L = {&dn, NULL, proto, 0};
  L.numel = eng_layout_dn_proto(proto, &dn);
  check_layer(&f, "dn.", &L, pos);

  // Gated full attention: 4 heads of 16 over 2 kv heads, 4 of 16 dims rotated.
  // (One layer, full attention every layer: the DN dims are unused.)
  eng_config ga = {.vocab = 8, .d_model = 40, .n_layers = 1, .n_heads = 4, .n_kv_heads = 2, .head_dim = 16,
                   .d_ff = 56, .max_pos = 4096, .rope_theta = 10000.0f, .rms_eps = 1e-6f, .init_std = 0.02f,
                   .rope_dim = 4, .full_every = 1, .dn = {2, 4, 6, 10, 4}};
  eng_arch_apply(&ga, ENG_ARCH_QWEN3_5); // q/k norms, the output gate, zero-centred norms
  eng_err e = {0};
  CHECK_OK(eng_config_validate(&ga, "the test's config", &e), &e);
  eng_layout lo;
  eng_layout_init(&lo, &ga);
  layer G = {&ga, &lo, NULL, lo.layer_numel};
  check_layer(&f, "ga.", &G, pos);

  free(pos);
  eng_st_close(&f);
  printf("test_hybrid_layers: ok\n");
  return 0;
}
