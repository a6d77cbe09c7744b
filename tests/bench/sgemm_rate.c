// The machine's sgemm rate with the threads OpenMP is given: the ceiling the
// engine's achieved GFLOP/s is compared against in tests/bench/engine.sh.
// Times OpenBLAS's cblas_sgemm and the engine's eng_k_sgemm on the route it
// would take (kernels/cpu/gemm.h: TRAIND_CPU_GEMM, else the cpu's best), and
// with "all" every route this cpu runs, on the same n×n×n product.
// Prints "sgemm_gflops <median of 5 one-second runs> <OpenBLAS core>" and
// "engine_sgemm_gflops <median> <route>" (a line per route with "all").
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
  int n = argc > 1 ? atoi(argv[1]) : 2048; // [n [all]]
  float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n), *c = malloc(sizeof(float) * n * n);
  for (long i = 0; i < (long)n * n; i++) a[i] = (float)(i % 17) * 1e-3f, b[i] = (float)(i % 13) * 1e-3f;
  int all = argc > 2 && strcmp(argv[2], "all") == 0;
  char msg[256];
  int route = eng_k_gemm_route_init(msg, sizeof msg);
  if (route < 0) {
    fprintf(stderr, "sgemm_rate: %s\n", msg);
    return 2;
  }
  eng_k_blas_core_fit(); // OpenBLAS as the blas route runs it, not a generic core
  printf("sgemm_gflops %.1f %s\n", rate(openblas, n, a, b, c), eng_k_blas_core());
  for (int r = 0; r < ENG_K_GEMM_NROUTES; r++) {
    if (all ? eng_k_gemm_route_set(r) != 0 : r != route) continue;
    printf("engine_sgemm_gflops %.1f %s\n", rate(engine, n, a, b, c), eng_k_gemm_route_name(r));
  }
  free(a);
  free(b);
  free(c);
  return 0;
}
