// The gated delta rule's cpu kernels (kernels.h: eng_k_deltarule_*) against
// transformers' torch_chunk_gated_delta_rule (tests/ref/gen_hybrid_fixtures.py):
// output and every input's gradient on 3 value heads per key head, head dims
// 12 and 10, 150 tokens (not a multiple of the chunk) and a packed row. Then
// the bits: the same with one thread and with two, with the rows as one call
// or one call each (micro-batches), and with q, k, v read as views into wider
// rows. And the hybrid's other blocks: the causal conv with SiLU, the L2
// norm, the gated RMSNorm, partial RoPE and the attention output gate.
#include <omp.h>
#include <string.h>

#include "check.h"
#include "model/rope.h"
#include "fixture.h"
#include "kernels/kernels.h"

typedef struct io {
  float *out, *states, *dq, *dk, *dv, *dg, *dbeta;
} io;

typedef struct shape {
  int B, T, Hk, Hv, kd, vd;
} shape;

static io io_new(shape s) {
  size_t nq = (size_t)s.B * s.T * s.Hk * s.kd, nv = (size_t)s.B * s.T * s.Hv * s.vd, ng = (size_t)s.B * s.T * s.Hv;
  io r = {malloc(nv * 4), malloc(eng_k_deltarule_states_floats(s.B, s.T, s.Hv, s.kd, s.vd) * 4), malloc(nq * 4),
          malloc(nq * 4), malloc(nv * 4), malloc(ng * 4), malloc(ng * 4)};
  return r;
}

static void io_free(io *r) {
  free(r->out), free(r->states), free(r->dq), free(r->dk), free(r->dv), free(r->dg), free(r->dbeta);
}

// Rows [b0, b0 + nb) of the batch in one forward and backward call; q, k and
// v are copied into rows `pad` floats wider than they are.
static void run(io *r, shape s, int b0, int nb, int pad, const float *q, const float *k, const float *v,
                const float *g, const float *beta, const float *dout, const int32_t *pos) {
  const int lq = s.Hk * s.kd, lv = s.Hv * s.vd, lg = s.Hv, ldq = lq + pad, ldv = lv + pad;
  const size_t n = (size_t)nb * s.T, o = (size_t)b0 * s.T;
  float *qw = calloc(n * ldq, 4), *kw = calloc(n * ldq, 4), *vw = calloc(n * ldv, 4);
  float *dqw = calloc(n * ldq, 4), *dkw = calloc(n * ldq, 4), *dvw = calloc(n * ldv, 4);
  for (size_t i = 0; i < n; i++) {
    memcpy(qw + i * ldq, q + (o + i) * lq, lq * 4);
    memcpy(kw + i * ldq, k + (o + i) * lq, lq * 4);
    memcpy(vw + i * ldv, v + (o + i) * lv, lv * 4);
  }
  float *states = r->states + eng_k_deltarule_states_floats(b0, s.T, s.Hv, s.kd, s.vd);
  eng_k_deltarule_fwd(r->out + o * lv, states, qw, ldq, kw, ldq, vw, ldv, g + o * lg, beta + o * lg, lg,
                      pos ? pos + o : NULL, nb, s.T, s.Hk, s.Hv, s.kd, s.vd);
  eng_k_deltarule_bwd(dqw, dkw, dvw, r->dg + o * lg, r->dbeta + o * lg, lg, dout + o * lv, states, qw, ldq, kw, ldq,
                      vw, ldv, g + o * lg, beta + o * lg, lg, pos ? pos + o : NULL, nb, s.T, s.Hk, s.Hv, s.kd, s.vd);
  for (size_t i = 0; i < n; i++) {
    memcpy(r->dq + (o + i) * lq, dqw + i * ldq, lq * 4);
    memcpy(r->dk + (o + i) * lq, dkw + i * ldq, lq * 4);
    memcpy(r->dv + (o + i) * lv, dvw + i * ldv, lv * 4);
  }
  free(qw), free(kw), free(vw), free(dqw), free(dkw), free(dvw);
}

static void same_bits(const io *a, const io *b, shape s, const char *what) {
  size_t nq = (size_t)s.B * s.T * s.Hk * s.kd, nv = (size_t)s.B * s.T * s.Hv * s.vd, ng = (size_t)s.B * s.T * s.Hv;
  CHECK(!memcmp(a->out, b->out, nv * 4) && !memcmp(a->dv, b->dv, nv * 4), "%s: out or dv bits differ", what);
  CHECK(!memcmp(a->dq, b->dq, nq * 4) && !memcmp(a->dk, b->dk, nq * 4), "%s: dq or dk bits differ", what);
  CHECK(!memcmp(a->dg, b->dg, ng * 4) && !memcmp(a->dbeta, b->dbeta, ng * 4), "%s: dg or dbeta bits differ", what);
  CHECK(!memcmp(a->states, b->states, eng_k_deltarule_states_floats(s.B, s.T, s.Hv, s.kd, s.vd) * 4),
        "%s: states differ", what);
}

// max|Δ|/max|ref| of n floats against the fixture's tensor `name`.
static void near(const eng_st_file *f, const char *name, const float *got, size_t n, double tol) {
  size_t m;
  float *ref = fx_f32(f, name, &m);
  CHECK(m == n, "%s: %zu floats, the kernel gave %zu", name, m, n);
  double rel = fx_rel(got, ref, n);
  printf("%-9s max|d|/max|ref| %.3g\n", name, rel);
  CHECK(rel < tol, "%s differs from transformers by %.3g (tolerance %.0e)", name, rel, tol);
  free(ref);
}

// The conv with SiLU, the L2 norm and the gated RMSNorm against transformers'
// own functions (gen_hybrid_fixtures.py's blocks()), on the same rows.
static void blocks(const eng_st_file *f, shape s, const int32_t *pos) {
  const int n = s.B * s.T, C = 2 * s.Hk * s.kd + s.Hv * s.vd, K = 4;
  float *x = fx_f32(f, "conv.x", NULL), *w = fx_f32(f, "conv.w", NULL), *dy = fx_f32(f, "conv.dy", NULL);
  float *y = malloc((size_t)n * C * 4), *u = malloc((size_t)n * C * 4), *dx = malloc((size_t)n * C * 4);
  float *dw = calloc((size_t)C * K, 4);
  eng_k_conv_silu_fwd(y, u, x, C, w, pos, s.B, s.T, C, K);
  eng_k_conv_silu_bwd(dx, C, dw, dy, u, x, C, w, pos, s.B, s.T, C, K);
  near(f, "conv.y", y, (size_t)n * C, 1e-6);
  near(f, "conv.dx", dx, (size_t)n * C, 1e-6);
  near(f, "conv.dw", dw, (size_t)C * K, 1e-5);
  free(x), free(w), free(dy), free(y), free(u), free(dx), free(dw);

  const int lq = s.Hk * s.kd;
  x = fx_f32(f, "l2.x", NULL), dy = fx_f32(f, "l2.dy", NULL);
  y = malloc((size_t)n * lq * 4), dx = malloc((size_t)n * lq * 4);
  float *r = malloc((size_t)n * s.Hk * 4);
  eng_k_l2norm_fwd(y, lq, r, x, lq, n, s.Hk, s.kd, 1e-6f);
  eng_k_l2norm_bwd(dx, lq, dy, lq, x, lq, r, n, s.Hk, s.kd);
  near(f, "l2.y", y, (size_t)n * lq, 1e-6);
  near(f, "l2.dx", dx, (size_t)n * lq, 1e-6);
  free(x), free(dy), free(y), free(dx), free(r);

  const int lv = s.Hv * s.vd;
  x = fx_f32(f, "gnorm.x", NULL), dy = fx_f32(f, "gnorm.dy", NULL), w = fx_f32(f, "gnorm.w", NULL);
  float *z = fx_f32(f, "gnorm.z", NULL), *dz = malloc((size_t)n * lv * 4), *dn = malloc((size_t)n * lv * 4);
  y = malloc((size_t)n * lv * 4), dx = malloc((size_t)n * lv * 4), dw = calloc((size_t)s.vd, 4);
  r = malloc((size_t)n * s.Hv * 4);
  eng_k_gatednorm_fwd(y, r, x, z, lv, w, n, s.Hv, s.vd, 1e-6f);
  eng_k_gatednorm_bwd(dx, dw, dz, lv, dn, dy, x, z, lv, w, r, n, s.Hv, s.vd);
  near(f, "gnorm.y", y, (size_t)n * lv, 1e-6);
  near(f, "gnorm.dx", dx, (size_t)n * lv, 1e-5);
  near(f, "gnorm.dz", dz, (size_t)n * lv, 1e-6);
  near(f, "gnorm.dw", dw, (size_t)s.vd, 1e-5);
  free(x), free(dy), free(w), free(z), free(dz), free(dn), free(y), free(dx), free(dw), free(r);

  // Partial RoPE (6 of 24 values per head) in place, on the packed positions.
  const int hd = 24, lr = s.Hk * hd;
  y = fx_f32(f, "rope.x", NULL), dx = fx_f32(f, "rope.dy", NULL);
  eng_k_rope fr;
  eng_rope_table(&(eng_config){.rope_theta = 10000.0f, .head_dim = hd / 4}, &fr);
  eng_k_rope_fwd(y, lr, pos, s.B, s.T, s.Hk, hd, &fr);
  eng_k_rope_bwd(dx, lr, pos, s.B, s.T, s.Hk, hd, &fr);
  near(f, "rope.y", y, (size_t)n * lr, 1e-6);
  near(f, "rope.dx", dx, (size_t)n * lr, 1e-6);
  free(y), free(dx);

  // The output gate.
  x = fx_f32(f, "gate.x", NULL), z = fx_f32(f, "gate.g", NULL), dy = fx_f32(f, "gate.dy", NULL);
  y = malloc((size_t)n * lv * 4), dx = malloc((size_t)n * lv * 4), dz = malloc((size_t)n * lv * 4);
  eng_k_sgate_fwd(y, x, z, lv, s.vd, n, s.Hv, s.vd);
  eng_k_sgate_bwd(dx, dz, dy, x, z, lv, s.vd, n, s.Hv, s.vd);
  near(f, "gate.y", y, (size_t)n * lv, 1e-6);
  near(f, "gate.dx", dx, (size_t)n * lv, 1e-6);
  near(f, "gate.dg", dz, (size_t)n * lv, 1e-6);
  free(x), free(z), free(dy), free(y), free(dx), free(dz);
}

int main(void) {
  eng_st_file f;
  fx_open(&f, "hybrid_blocks");
  shape s = {2, 150, 2, 6, 12, 10};
  const eng_st_tensor *tq = eng_st_find(&f, "q"), *tv = eng_st_find(&f, "v");
  CHECK(tq && tq->ndim == 4 && tq->shape[0] == s.B && tq->shape[1] == s.T && tq->shape[2] == s.Hk &&
            tq->shape[3] == s.kd && tv && tv->shape[2] == s.Hv && tv->shape[3] == s.vd,
        "fixture shape is not the test's");
  float *q = fx_f32(&f, "q", NULL), *k = fx_f32(&f, "k", NULL), *v = fx_f32(&f, "v", NULL);
  float *g = fx_f32(&f, "g", NULL), *beta = fx_f32(&f, "beta", NULL), *dout = fx_f32(&f, "dout", NULL);
  int32_t *pos = fx_i32(&f, "pos", NULL);
  size_t nq, nv, ng;
  float *ref_out = fx_f32(&f, "out", &nv), *ref_dq = fx_f32(&f, "dq", &nq), *ref_dk = fx_f32(&f, "dk", NULL);
  float *ref_dv = fx_f32(&f, "dv", NULL), *ref_dg = fx_f32(&f, "dg", &ng), *ref_db = fx_f32(&f, "dbeta", NULL);

  io a = io_new(s);
  run(&a, s, 0, s.B, 0, q, k, v, g, beta, dout, pos);
  const struct {
    const char *name;
    const float *got, *ref;
    size_t n;
    double tol;
  } cmp[] = {{"out", a.out, ref_out, nv, 1e-5}, {"dq", a.dq, ref_dq, nq, 1e-5}, {"dk", a.dk, ref_dk, nq, 1e-5},
             {"dv", a.dv, ref_dv, nv, 1e-5},    {"dg", a.dg, ref_dg, ng, 1e-5}, {"dbeta", a.dbeta, ref_db, ng, 1e-5}};
  for (size_t i = 0; i < sizeof cmp / sizeof cmp[0]; i++) {
    double rel = fx_rel(cmp[i].got, cmp[i].ref, cmp[i].n);
    printf("%-6s max|d|/max|ref| %.3g\n", cmp[i].name, rel);
    CHECK(rel < cmp[i].tol, "%s differs from transformers by %.3g (tolerance %.0e)", cmp[i].name, rel, cmp[i].tol);
  }

  // The bits do not depend on the thread count, the rows per call or the row strides.
  io one = io_new(s), split = io_new(s), wide = io_new(s);
  int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  run(&one, s, 0, s.B, 0, q, k, v, g, beta, dout, pos);
  omp_set_num_threads(threads > 1 ? threads : 2);
  same_bits(&a, &one, s, "1 thread against the default");
  for (int b = 0; b < s.B; b++) run(&split, s, b, 1, 0, q, k, v, g, beta, dout, pos);
  same_bits(&a, &split, s, "a call per row");
  run(&wide, s, 0, s.B, 7, q, k, v, g, beta, dout, pos);
  same_bits(&a, &wide, s, "views into wider rows");

  // Without pos, row 1 (one sequence) is what it was; row 0 is no longer
  // three records, so its output must change.
  io nopos = io_new(s);
  run(&nopos, s, 0, s.B, 0, q, k, v, g, beta, dout, NULL);
  size_t half = nv / 2;
  CHECK(!memcmp(nopos.out + half, a.out + half, half * 4), "row 1 depends on pos");
  CHECK(memcmp(nopos.out, a.out, half * 4), "row 0's record starts change nothing");

  blocks(&f, s, pos);

  io_free(&a), io_free(&one), io_free(&split), io_free(&wide), io_free(&nopos);
  free(q), free(k), free(v), free(g), free(beta), free(dout), free(pos);
  free(ref_out), free(ref_dq), free(ref_dk), free(ref_dv), free(ref_dg), free(ref_db);
  eng_st_close(&f);
  printf("test_hybrid_blocks: ok\n");
  return 0;
}
