// Rate of the causal GQA attention kernels (eng_k_attention_fwd/bwd) on one
// shape, by default the 5M model of tests/bench/engine.sh: B 8, T 256, 8
// query heads, 4 kv heads, head dim 32, with 2 OpenMP threads.
// Usage: bench_attn_rate [B T H KV hd [reps [threads]]].
// Prints the median ms of one call of each and its GFLOP/s, counting only the
// useful causal work: T(T+1)/2 (query, key) pairs per (batch, head), each
// 2·hd flops per product; 2 products forward (Q·Kᵀ, P·V), 5 backward (Q·Kᵀ,
// dO·Vᵀ, dV, dK, dQ). The softmax's exps are not counted.
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kernels/kernels.h"

#include "bench.h"

// Normal-ish values from a fixed-seed LCG (sum of uniforms), times sd.
static float *randn(size_t n, float sd, unsigned *seed) {
  float *x = malloc(sizeof(float) * n);
  if (!x) exit(1);
  for (size_t i = 0; i < n; i++) {
    float s = 0.0f;
    for (int r = 0; r < 4; r++) {
      *seed = *seed * 1664525u + 1013904223u;
      s += (float)(*seed >> 8) / 16777216.0f - 0.5f;
    }
    x[i] = s * sd * 1.7320508f;
  }
  return x;
}

int main(int argc, char **argv) {
  int B = 8, T = 256, H = 8, KV = 4, hd = 32, reps = 200, threads = 2;
  if (argc > 5) B = atoi(argv[1]), T = atoi(argv[2]), H = atoi(argv[3]), KV = atoi(argv[4]), hd = atoi(argv[5]);
  if (argc > 6) reps = atoi(argv[6]);
  if (argc > 7) threads = atoi(argv[7]);
  if (B <= 0 || T <= 0 || KV <= 0 || H % KV || hd <= 0 || hd > ENG_K_MAX_HD || reps <= 0 || threads <= 0) {
    fprintf(stderr, "usage: bench_attn_rate [B T H KV hd [reps [threads]]]\n");
    return 2;
  }
  omp_set_num_threads(threads);
  unsigned seed = 12345;
  size_t nq = (size_t)B * T * H * hd, nk = (size_t)B * T * KV * hd, nl = (size_t)B * H * T;
  float *q = randn(nq, 1.5f, &seed), *k = randn(nk, 1.5f, &seed), *v = randn(nk, 1.0f, &seed);
  float *dout = randn(nq, 1.0f, &seed);
  float *out = malloc(sizeof(float) * nq), *lse = malloc(sizeof(float) * nl), *dq = malloc(sizeof(float) * nq);
  float *dk = malloc(sizeof(float) * nk), *dv = malloc(sizeof(float) * nk);
  double *tf = malloc(sizeof(double) * reps), *tb = malloc(sizeof(double) * reps);
  if (!out || !lse || !dq || !dk || !dv || !tf || !tb) return 1;
  for (int r = -3; r < reps; r++) { // 3 warm-up calls
    double t0 = eng_now();
    eng_k_attention_fwd(out, lse, q, H * hd, k, KV * hd, v, KV * hd, NULL, B, T, H, KV, hd, 0);
    double t1 = eng_now();
    eng_k_attention_bwd(dq, dk, dv, dout, out, lse, q, H * hd, k, KV * hd, v, KV * hd, NULL, B, T, H, KV, hd, 0);
    double t2 = eng_now();
    if (r >= 0) tf[r] = t1 - t0, tb[r] = t2 - t1;
  }
  double pairs = (double)B * H * T * (T + 1) / 2.0;
  double mf = bench_median(tf, reps), mb = bench_median(tb, reps);
  printf("shape B=%d T=%d H=%d KV=%d hd=%d threads=%d reps=%d\n", B, T, H, KV, hd, threads, reps);
  printf("attn_fwd_ms %.3f gflops %.1f\n", mf * 1e3, 4.0 * hd * pairs / mf / 1e9);
  printf("attn_bwd_ms %.3f gflops %.1f\n", mb * 1e3, 10.0 * hd * pairs / mb / 1e9);
  free(q), free(k), free(v), free(dout), free(out), free(lse), free(dq), free(dk), free(dv), free(tf), free(tb);
  return 0;
}
