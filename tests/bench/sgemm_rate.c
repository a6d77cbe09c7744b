// The machine's sgemm rate with the threads OpenMP is given: the ceiling the
// engine's achieved GFLOP/s is compared against in tests/bench/engine.sh.
// Times OpenBLAS's cblas_sgemm and the engine's eng_k_sgemm (its AMX route
// where the cpu has one, kernels/cpu/gemm_amx.h) on the same n×n×n product.
// Prints "sgemm_gflops <median of 5 one-second runs>" (OpenBLAS) and
// "engine_sgemm_gflops <median> <route>".
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"
#include "kernels/cpu/gemm.h"

typedef void (*product_fn)(int n, const float *a, const float *b, float *c);

static void openblas(int n, const float *a, const float *b, float *c) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1, a, n, b, n, 0, c, n);
}

static void engine(int n, const float *a, const float *b, float *c) { eng_k_sgemm(0, 1, n, n, n, a, n, b, n, 0, c, n); }

static double rate(product_fn f, int n, const float *a, const float *b, float *c) {
  f(n, a, b, c); // warm-up
  double rates[5];
  for (int r = 0; r < 5; r++) {
    int reps = 0;
    double t0 = eng_now(), t;
    do {
      f(n, a, b, c);
      reps++;
      t = eng_now() - t0;
    } while (t < 1.0);
    rates[r] = 2.0 * n * n * (double)n * reps / t / 1e9;
  }
  bench_sort(rates, 5);
  return rates[2];
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 2048;
  float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n), *c = malloc(sizeof(float) * n * n);
  for (long i = 0; i < (long)n * n; i++) a[i] = (float)(i % 17) * 1e-3f, b[i] = (float)(i % 13) * 1e-3f;
  printf("sgemm_gflops %.1f\n", rate(openblas, n, a, b, c));
  printf("engine_sgemm_gflops %.1f %s\n", rate(engine, n, a, b, c), eng_k_sgemm_amx() ? "amx" : "fp32");
  free(a);
  free(b);
  free(c);
  return 0;
}
