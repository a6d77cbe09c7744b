// The machine's sgemm rate with the threads OpenMP is given: the ceiling the
// engine's achieved GFLOP/s is compared against in tests/bench/engine.sh.
// Prints "sgemm_gflops <median of 5 one-second runs>".
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench.h"

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 2048;
  float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n), *c = malloc(sizeof(float) * n * n);
  for (long i = 0; i < (long)n * n; i++) a[i] = (float)(i % 17) * 1e-3f, b[i] = (float)(i % 13) * 1e-3f;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1, a, n, b, n, 0, c, n); // warm-up
  double rates[5];
  for (int r = 0; r < 5; r++) {
    int reps = 0;
    double t0 = eng_now(), t;
    do {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1, a, n, b, n, 0, c, n);
      reps++;
      t = eng_now() - t0;
    } while (t < 1.0);
    rates[r] = 2.0 * n * n * (double)n * reps / t / 1e9;
  }
  bench_sort(rates, 5);
  printf("sgemm_gflops %.1f\n", rates[2]);
  free(a);
  free(b);
  free(c);
  return 0;
}
