// One POET-X weight (engine/poet/poet.h) against the plain-PyTorch
// reference of tests/ref/gen_poet_fixtures.py (float64 autograd), on a
// non-square weight (96 × 64, block 32: three output blocks, two input
// blocks): the rotations from θ by the Cayley–Neumann series, their
// orthogonality error, the forward, dx and dθ of both sides, in the fast
// mode (z kept) and the memory mode (z recomputed), which give the same bits;
// the effective weight an export writes; and the merge's new base, under
// which the chain at R = I computes what it computed before. Then a
// finite-difference check of dθ at a second point, so the reference's own
// gradient is not the only judge.
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fixture.h"
#include "poet/poet.h"
#include "route.h"

enum { M = 96, N = 64, B = 32, T = 40 };

static void near(const char *what, const float *got, const float *ref, size_t n, double tol) {
  double rel = fx_rel(got, ref, n);
  printf("%-28s max|d|/max|ref| %.2e\n", what, rel);
  CHECK(rel <= tol, "%s: %.3e relative to the reference (tolerance %.0e)", what, rel, tol);
}

// L = Σ y·dy for the weight at theta (in, out), in double.
static double loss_at(const eng_poet_weight *w0, const float *th_in, const float *th_out, const float *x,
                      const float *dy) {
  eng_poet_weight w = *w0;
  float *rin = malloc(sizeof(float) * (N / B) * B * B), *rout = malloc(sizeof(float) * (M / B) * B * B);
  float *cw = malloc(sizeof(float) * 2 * B * B), *y = malloc(sizeof(float) * T * M);
  float *work = malloc(sizeof(float) * eng_poet_work(&w, T));
  eng_poet_cayley(N / B, B, th_in, rin, cw);
  eng_poet_cayley(M / B, B, th_out, rout, cw);
  w.Rin = rin;
  w.Rout = rout;
  eng_poet_forward(&w, T, x, N, y, M, NULL, work);
  double l = 0;
  for (int i = 0; i < T * M; i++) l += (double)y[i] * dy[i];
  free(rin), free(rout), free(cw), free(y), free(work);
  return l;
}

int main(void) {
  test_route_announce();
  eng_st_file f;
  fx_open(&f, "poet_linear");
  size_t tri = eng_poet_tri(B);
  float *x = fx_f32(&f, "x", NULL), *w0 = fx_f32(&f, "w0", NULL), *bias = fx_f32(&f, "bias", NULL);
  float *th_in = fx_f32(&f, "theta_in", NULL), *th_out = fx_f32(&f, "theta_out", NULL), *dy = fx_f32(&f, "dy", NULL);
  int32_t *pin = fx_i32(&f, "pin", NULL), *pout = fx_i32(&f, "pout", NULL);
  int32_t *pin2 = fx_i32(&f, "pin2", NULL), *pout2 = fx_i32(&f, "pout2", NULL);
  float *orth_ref = fx_f32(&f, "orth_err", NULL);

  // Rotations, and how orthogonal the series leaves them.
  float *rin = malloc(sizeof(float) * (N / B) * B * B), *rout = malloc(sizeof(float) * (M / B) * B * B);
  float *cw = malloc(sizeof(float) * 6 * B * B);
  eng_poet_cayley(N / B, B, th_in, rin, cw);
  eng_poet_cayley(M / B, B, th_out, rout, cw);
  float *ref = fx_f32(&f, "r_in", NULL);
  near("R_in", rin, ref, (size_t)(N / B) * B * B, 1e-5);
  free(ref);
  ref = fx_f32(&f, "r_out", NULL);
  near("R_out", rout, ref, (size_t)(M / B) * B * B, 1e-5);
  free(ref);
  double oe_in = eng_poet_orth_err(N / B, B, rin), oe_out = eng_poet_orth_err(M / B, B, rout);
  printf("orthogonality error |R^T R - I|_F: in %.3e (reference %.3e), out %.3e (reference %.3e)\n", oe_in,
         orth_ref[0], oe_out, orth_ref[1]);
  CHECK(fabs(oe_in - orth_ref[0]) <= 1e-3 * orth_ref[0] + 1e-6 && fabs(oe_out - orth_ref[1]) <= 1e-3 * orth_ref[1] + 1e-6,
        "orthogonality errors differ from the reference's");
  float *zero = calloc(tri * (M / B), sizeof(float)), *eye = malloc(sizeof(float) * (M / B) * B * B);
  eng_poet_cayley(M / B, B, zero, eye, cw);
  CHECK(eng_poet_orth_err(M / B, B, eye) == 0.0, "θ = 0 does not give R = I exactly");

  eng_poet_weight w = {M, N, B, w0, bias, pin, pout, rin, rout};
  float *work = malloc(sizeof(float) * eng_poet_work(&w, T));
  float *y = malloc(sizeof(float) * T * M), *y2 = malloc(sizeof(float) * T * M), *z = malloc(sizeof(float) * T * M);
  eng_poet_forward(&w, T, x, N, y, M, z, work); // fast mode: z kept
  eng_poet_forward(&w, T, x, N, y2, M, NULL, work);
  CHECK(!memcmp(y, y2, sizeof(float) * T * M), "the forward with and without z kept differ");
  ref = fx_f32(&f, "y", NULL);
  near("y", y, ref, (size_t)T * M, 1e-4);
  free(ref);

  // Backward in both modes: the same bits, the reference's values.
  float *dx[2], *dRin[2], *dRout[2], *dthin[2], *dthout[2];
  for (int mode = 0; mode < 2; mode++) {
    dx[mode] = malloc(sizeof(float) * T * N);
    dRin[mode] = calloc((size_t)(N / B) * B * B, sizeof(float));
    dRout[mode] = calloc((size_t)(M / B) * B * B, sizeof(float));
    dthin[mode] = calloc(tri * (N / B), sizeof(float));
    dthout[mode] = calloc(tri * (M / B), sizeof(float));
    eng_poet_backward(&w, T, x, N, mode ? NULL : z, dy, M, dx[mode], N, 0, dRin[mode], dRout[mode], work);
    eng_poet_cayley_bwd(N / B, B, th_in, dRin[mode], dthin[mode], cw);
    eng_poet_cayley_bwd(M / B, B, th_out, dRout[mode], dthout[mode], cw);
  }
  CHECK(!memcmp(dx[0], dx[1], sizeof(float) * T * N) && !memcmp(dthin[0], dthin[1], sizeof(float) * tri * (N / B)) &&
            !memcmp(dthout[0], dthout[1], sizeof(float) * tri * (M / B)),
        "the fast and the memory mode's gradients differ");
  printf("fast and memory modes: the same bits\n");
  ref = fx_f32(&f, "dx", NULL);
  near("dx", dx[0], ref, (size_t)T * N, 1e-4);
  free(ref);
  ref = fx_f32(&f, "dtheta_in", NULL);
  near("dtheta_in", dthin[0], ref, tri * (N / B), 1e-4);
  free(ref);
  ref = fx_f32(&f, "dtheta_out", NULL);
  near("dtheta_out", dthout[0], ref, tri * (M / B), 1e-4);
  free(ref);
  // dx accumulates with add = 1.
  memcpy(dx[1], dx[0], sizeof(float) * T * N);
  eng_poet_backward(&w, T, x, N, z, dy, M, dx[1], N, 1, dRin[1], dRout[1], work);
  for (int i = 0; i < T * N; i++) CHECK(dx[1][i] == 2.0f * dx[0][i], "dx with add = 1 does not accumulate");

  // The effective weight, and the merge's base under new permutations.
  float *weff = malloc(sizeof(float) * M * N), *wwork = malloc(sizeof(float) * eng_poet_effective_work(M, N, B));
  eng_poet_effective(&w, weff, wwork);
  ref = fx_f32(&f, "w_eff", NULL);
  near("effective weight", weff, ref, (size_t)M * N, 1e-5);
  free(ref);
  float *w0n = malloc(sizeof(float) * M * N);
  eng_poet_rebase(M, N, weff, pin2, pout2, w0n);
  ref = fx_f32(&f, "w0_new", NULL);
  near("merged base", w0n, ref, (size_t)M * N, 1e-5);
  free(ref);
  float *ein = malloc(sizeof(float) * (N / B) * B * B);
  eng_poet_cayley(N / B, B, zero, ein, cw);
  eng_poet_weight merged = {M, N, B, w0n, bias, pin2, pout2, ein, eye};
  eng_poet_forward(&merged, T, x, N, y2, M, NULL, work);
  near("y after the merge", y2, y, (size_t)T * M, 1e-5);

  // Central differences of L = Σ y·dy in a few θ of each side, in double
  // around the fixture's point (fp32 forward: step 1e-2 keeps rounding small).
  const int probes[] = {0, 17, 300, (int)tri + 5, (int)(2 * tri) - 1};
  for (int side = 0; side < 2; side++) {
    float *th = side ? th_out : th_in, *g = side ? dthout[0] : dthin[0];
    for (size_t p = 0; p < sizeof probes / sizeof probes[0]; p++) {
      int i = probes[p];
      float keep = th[i], h = 1e-2f;
      th[i] = keep + h;
      double lp = loss_at(&w, th_in, th_out, x, dy);
      th[i] = keep - h;
      double lm = loss_at(&w, th_in, th_out, x, dy);
      th[i] = keep;
      double fd = (lp - lm) / (2.0 * h);
      printf("dθ_%s[%d]: %.5f, central difference %.5f\n", side ? "out" : "in", i, g[i], fd);
      CHECK(fabs(fd - g[i]) <= 1e-3 * fabs(g[i]) + 1e-2, "dθ_%s[%d] = %g, the loss's slope %g", side ? "out" : "in", i,
            g[i], fd);
    }
  }
  for (int mode = 0; mode < 2; mode++) free(dx[mode]), free(dRin[mode]), free(dRout[mode]), free(dthin[mode]), free(dthout[mode]);
  void *bufs[] = {x, w0, bias, th_in, th_out, dy, pin, pout, pin2, pout2, orth_ref, rin, rout, cw, zero, eye,
                  work, y, y2, z, weff, wwork, w0n, ein};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
  eng_st_close(&f);
  printf("ok\n");
  return 0;
}
