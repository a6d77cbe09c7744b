// Compute-optimal sizing (compute/scaling.h) against the Chinchilla paper
// (Hoffmann et al. 2022): with its fit, the compute-optimal parameters for
// each budget of its Table A3 (approach 3) are the table's within 10%, and
// the tokens are those the table's FLOPs leave for its parameters
// (C / 6N) within 10%; Gopher's budget gives the paper's 40B. The Qwen3
// shapes count the parameters their model cards state, and the nearest
// shape to a count is found.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "compute/scaling.h"

int main(void) {
  // Table A3, approach 3: parameters, FLOPs, tokens. The 175B row prints
  // 1.26e+24 FLOPs, a typo for 6 · 175e9 · 12.0e12 = 1.26e25.
  static const double a3[][3] = {{400e6, 2.21e19, 9.2e9},     {1e9, 1.62e20, 27.1e9},     {10e9, 2.46e22, 410.1e9},
                                 {67e9, 1.71e24, 4.1e12},     {175e9, 1.26e25, 12.0e12},  {280e9, 3.52e25, 20.1e12},
                                 {520e9, 1.36e26, 43.5e12},   {1e12, 5.65e26, 94.1e12},   {10e12, 8.55e28, 1425.5e12}};
  double worst = 0;
  for (size_t i = 0; i < sizeof a3 / sizeof a3[0]; i++) {
    double N, D, want_D = a3[i][1] / (6 * a3[i][0]);
    eng_scaling_optimal(&eng_scaling_chinchilla, a3[i][1], &N, &D);
    double en = N / a3[i][0] - 1, ed = D / want_D - 1;
    printf("%.3g FLOPs: N %.4g (table %.4g, %+.1f%%), D %.4g (C/6N %.4g, %+.1f%%; table %.4g)\n", a3[i][1], N,
           a3[i][0], 100 * en, D, want_D, 100 * ed, a3[i][2]);
    CHECK(fabs(en) <= 0.10 && fabs(ed) <= 0.10, "%.3g FLOPs: N %.4g vs %.4g, D %.4g vs %.4g", a3[i][1], N, a3[i][0], D,
          want_D);
    worst = fmax(worst, fmax(fabs(en), fabs(ed)));
  }
  double N, D;
  eng_scaling_optimal(&eng_scaling_chinchilla, 5.76e23, &N, &D);
  CHECK(fabs(N / 40e9 - 1) < 0.05, "Gopher's budget: N %.4g, the paper projects 40B", N);
  CHECK(fabs(6 * N * D / 5.76e23 - 1) < 1e-12, "6ND %.6g is not the budget", 6 * N * D);
  printf("Gopher's 5.76e23 FLOPs: %.4g parameters, %.4g tokens; Table A3 within %.1f%%\n", N, D, 100 * worst);

  // Besiroglu et al.'s refit: about 20 tokens per parameter.
  eng_scaling_optimal(&eng_scaling_besiroglu, 5.76e23, &N, &D);
  CHECK(D / N > 15 && D / N < 30, "besiroglu: %.1f tokens per parameter", D / N);

  eng_scaling_fit f;
  eng_err e = {0};
  CHECK_OK(eng_scaling_parse("1.8,400,400,0.3,0.3", &f, &e), &e);
  CHECK(f.A == 400 && f.beta == 0.3, "parsed %g %g", f.A, f.beta);
  CHECK(eng_scaling_parse("1.8,400,400,0.3", &f, &e) == ENG_EINVAL && strstr(e.msg, "fit:"), "got: %s", e.msg);
  CHECK(eng_scaling_parse("1.8,400,400,-0.3,0.3", &f, &e) == ENG_EINVAL && strstr(e.msg, "fit.alpha"), "got: %s",
        e.msg);

  // The published shapes: total parameters as their model cards give them.
  static const double card[] = {0.6e9, 1.7e9, 4.0e9, 8.2e9, 14.8e9, 32.8e9};
  eng_qwen3_shape pub[8];
  int n = eng_qwen3_published(pub, 8, 151936);
  CHECK(n == 6, "%d published shapes", n);
  for (int i = 0; i < n; i++) {
    printf("%-11s %.4g parameters (model card %.3g)\n", pub[i].name, pub[i].params, card[i]);
    CHECK(fabs(pub[i].params / card[i] - 1) < 0.03, "%s: %.4g parameters, its card says %.3g", pub[i].name,
          pub[i].params, card[i]);
  }
  eng_qwen3_shape near[4];
  n = eng_qwen3_nearest(pub[3].params, 151936, near, 4);
  CHECK(n == 4 && !strcmp(near[0].name, "Qwen3-8B"), "nearest to Qwen3-8B's count: %s", near[0].name);
  for (int i = 1; i < n; i++)
    CHECK(fabs(log(near[i].params / pub[3].params)) >= fabs(log(near[i - 1].params / pub[3].params)),
          "not nearest first at %d", i);
  n = eng_qwen3_nearest(3e6, 256, near, 1);
  CHECK(n == 1 && fabs(near[0].params / 3e6 - 1) < 0.2, "nearest to 3M (vocab 256): %s, %.4g", near[0].name,
        near[0].params);
  printf("nearest to 3e6 parameters with 256 tokens: %s (%.4g)\n", near[0].name, near[0].params);
  printf("test_scaling: ok\n");
  return 0;
}
