// A whole Gated DeltaNet decoder layer on the cpu (exec/layer_dn.h) against
// transformers' Qwen3_5DecoderLayer (linear_attention;
// tests/ref/gen_hybrid_fixtures.py's dn_layer): output, input gradient and
// every parameter's gradient, on a packed row and an unpacked one of 150
// tokens. Then the bits of y and dx: the same with a call per row
// (micro-batches) and with one thread.
#include <omp.h>
#include <string.h>

#include "check.h"
#include "exec/layer_dn.h"
#include "fixture.h"

enum { B = 2, T = 150 };

typedef struct run {
  float *y, *dx, *dw;
} run;

static run layer_run(const eng_config *c, const eng_tensor *proto, size_t numel, const float *w, const float *x,
                     const float *dy, const int32_t *pos, int rows_per_call) {
  const size_t d = (size_t)c->d_model;
  run r = {malloc(B * T * d * 4), malloc(B * T * d * 4), calloc(numel, 4)};
  for (int b0 = 0; b0 < B; b0 += rows_per_call) {
    eng_dn_acts a;
    eng_dn_scratch s;
    float *abuf = malloc(eng_dn_acts_floats(c, rows_per_call, T) * 4);
    float *sbuf = malloc(eng_dn_scratch_floats(c, rows_per_call, T) * 4);
    eng_dn_acts_bind(&a, abuf, c, rows_per_call, T);
    eng_dn_scratch_bind(&s, sbuf, c, rows_per_call, T);
    const size_t o = (size_t)b0 * T;
    eng_dn_layer_fwd(c, proto, w, x + o * d, r.y + o * d, pos + o, rows_per_call, T, &a);
    eng_dn_layer_bwd(c, proto, w, r.dw, x + o * d, &a, dy + o * d, r.dx + o * d, pos + o, rows_per_call, T, &s);
    free(abuf), free(sbuf);
  }
  return r;
}

int main(void) {
  eng_st_file f;
  fx_open(&f, "hybrid_blocks");
  eng_config c = {.d_model = 40, .d_ff = 56, .rms_eps = 1e-6f, .dn = {2, 4, 6, 10, 4}};
  eng_tensor proto[ENG_P_LAYER_COUNT];
  const size_t numel = eng_layout_dn_proto(proto, &c);
  const size_t skip = strlen("model.layers.0.");

  // The layer's shard from the fixture's weights, each by its name.
  float *w = calloc(numel, 4);
  int found = 0;
  for (int p = 0; p < ENG_P_LAYER_COUNT; p++) {
    if (!proto[p].numel) continue;
    char name[160];
    snprintf(name, sizeof name, "dn.w.%s", proto[p].name + skip);
    size_t m;
    float *t = fx_f32(&f, name, &m);
    CHECK(m == proto[p].numel, "%s: %zu floats, the layout has %zu", name, m, proto[p].numel);
    memcpy(w + proto[p].off, t, m * 4);
    free(t);
    found++;
  }
  CHECK(found == 14, "the layout has %d tensors, transformers' layer 14", found);

  size_t nx;
  float *x = fx_f32(&f, "dn.x", &nx), *dy = fx_f32(&f, "dn.dy", NULL);
  int32_t *pos = fx_i32(&f, "pos", NULL);
  CHECK(nx == (size_t)B * T * c.d_model, "dn.x has %zu floats", nx);
  run r = layer_run(&c, proto, numel, w, x, dy, pos, B);

  float *ref = fx_f32(&f, "dn.y", NULL);
  double rel = fx_rel(r.y, ref, nx);
  printf("%-40s %.3g\n", "y", rel);
  CHECK(rel < 1e-5, "y differs from transformers by %.3g", rel);
  free(ref);
  ref = fx_f32(&f, "dn.dx", NULL);
  rel = fx_rel(r.dx, ref, nx);
  printf("%-40s %.3g\n", "dx", rel);
  CHECK(rel < 1e-5, "dx differs from transformers by %.3g", rel);
  free(ref);
  for (int p = 0; p < ENG_P_LAYER_COUNT; p++) {
    if (!proto[p].numel) continue;
    char name[160];
    snprintf(name, sizeof name, "dn.grad.%s", proto[p].name + skip);
    ref = fx_f32(&f, name, NULL);
    rel = fx_rel(r.dw + proto[p].off, ref, proto[p].numel);
    printf("%-40s %.3g\n", name, rel);
    CHECK(rel < 1e-4, "%s differs from transformers by %.3g", name, rel);
    free(ref);
  }

  // y and dx do not depend on the rows per call or the thread count.
  run per_row = layer_run(&c, proto, numel, w, x, dy, pos, 1);
  CHECK(!memcmp(per_row.y, r.y, nx * 4) && !memcmp(per_row.dx, r.dx, nx * 4), "a call per row changes y or dx");
  int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  run one = layer_run(&c, proto, numel, w, x, dy, pos, B);
  omp_set_num_threads(threads);
  CHECK(!memcmp(one.y, r.y, nx * 4) && !memcmp(one.dx, r.dx, nx * 4) && !memcmp(one.dw, r.dw, numel * 4),
        "one thread changes y, dx or dw");

  run *all[] = {&r, &per_row, &one};
  for (int i = 0; i < 3; i++) free(all[i]->y), free(all[i]->dx), free(all[i]->dw);
  free(w), free(x), free(dy), free(pos);
  eng_st_close(&f);
  printf("test_dn_layer: ok\n");
  return 0;
}
