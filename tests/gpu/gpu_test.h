// Shared pieces of the GPU tests: the skip rule (exit 77, which ctest
// reports as skipped, never as passed, with the reason on stderr), device
// buffers, bf16 test data and the error measure with its tolerance scale.
#ifndef TESTS_GPU_GPU_TEST_H
#define TESTS_GPU_GPU_TEST_H

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/cuda/kernels_cuda.h"
#include "kernels/kmath_hd.h"

// bf16's machine epsilon (2^-7): every tolerance is a stated multiple of it,
// as in llm.c's tests, except where fp32 results are compared.
#define BF16_EPS 0.0078125

// Leaves with 77 unless a CUDA device is there.
static inline void gpu_require(const char *test) {
  eng_err e = {0};
  int n = eng_cuda_device_count(&e);
  if (n <= 0) {
    fprintf(stderr, "%s: SKIP: %s\n", test, n < 0 ? e.msg : "no CUDA device: the driver reports none");
    exit(77);
  }
}

#define CUDA_OK(call)                                                                       \
  do {                                                                                      \
    cudaError_t st_ = (call);                                                               \
    CHECK(st_ == cudaSuccess, "%s: %s", #call, cudaGetErrorString(st_));                    \
  } while (0)

// The helpers below finish their work before returning (cudaMemset and a
// pageable cudaMemcpy may still be in flight when they return, and the
// kernels under test run on a stream that does not wait for them).
static inline void *dev_alloc(size_t bytes) {
  void *p = NULL;
  CUDA_OK(cudaMalloc(&p, bytes ? bytes : 256));
  CUDA_OK(cudaMemset(p, 0, bytes ? bytes : 256));
  CUDA_OK(cudaDeviceSynchronize());
  return p;
}

static inline void to_dev(void *dev, const void *host, size_t bytes) {
  CUDA_OK(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaDeviceSynchronize());
}

static inline void *dev_from(const void *host, size_t bytes) {
  void *p = dev_alloc(bytes);
  to_dev(p, host, bytes);
  return p;
}

static inline void host_from(void *host, const void *dev, size_t bytes) {
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
}

// bf16 bits of xs[0..n), and the floats they stand for written back into xs.
static inline uint16_t *bf16_round(float *xs, size_t n) {
  uint16_t *h = malloc(n * sizeof *h + 1);
  CHECK(h, "out of memory");
  for (size_t i = 0; i < n; i++) {
    h[i] = eng_km_bf16_from_f32(xs[i]);
    xs[i] = eng_km_bf16_to_f32(h[i]);
  }
  return h;
}

// A device bf16 array downloaded as floats.
static inline float *dev_bf16_to_host(const void *dev, size_t n) {
  uint16_t *h = malloc(n * sizeof *h + 1);
  float *f = malloc(n * sizeof *f + 1);
  CHECK(h && f, "out of memory");
  host_from(h, dev, n * sizeof *h);
  for (size_t i = 0; i < n; i++) f[i] = eng_km_bf16_to_f32(h[i]);
  free(h);
  return f;
}

static inline float *dev_f32_to_host(const void *dev, size_t n) {
  float *f = malloc(n * sizeof *f + 1);
  CHECK(f, "out of memory");
  host_from(f, dev, n * sizeof *f);
  return f;
}

static uint64_t gpu_rng = 0x9e3779b97f4a7c15ull;

static inline uint64_t gpu_u64(void) {
  gpu_rng ^= gpu_rng << 13, gpu_rng ^= gpu_rng >> 7, gpu_rng ^= gpu_rng << 17;
  return gpu_rng;
}

static inline float gpu_frand(void) { // uniform in [-1, 1)
  return (float)((double)(gpu_u64() >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static inline int gpu_irand(int n) { return (int)(gpu_u64() >> 33) % n; } // in [0, n)

static inline float *frand_n(size_t n, float scale) {
  float *p = malloc(n * sizeof *p + 1);
  CHECK(p, "out of memory");
  for (size_t i = 0; i < n; i++) p[i] = scale * gpu_frand();
  return p;
}

// max|got − ref| / max|ref| (NaN fails), printed with its tolerance.
static inline double rel_err(const char *what, const float *got, const double *ref, size_t n, double tol) {
  double md = 0.0, mr = 0.0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - ref[i]);
    if (!(d <= md)) md = d;
    if (fabs(ref[i]) > mr) mr = fabs(ref[i]);
  }
  double rel = mr > 0 ? md / mr : md;
  printf("  %-34s rel err %.2e (tol %.2e)\n", what, rel, tol);
  CHECK(rel <= tol, "%s: relative error %.3e exceeds %.3e", what, rel, tol);
  return rel;
}

static inline double *to_double(const float *x, size_t n) {
  double *d = malloc(n * sizeof *d + 1);
  CHECK(d, "out of memory");
  for (size_t i = 0; i < n; i++) d[i] = x[i];
  return d;
}

static inline double rel_err_f(const char *what, const float *got, const float *ref, size_t n, double tol) {
  double *r = to_double(ref, n);
  double rel = rel_err(what, got, r, n, tol);
  free(r);
  return rel;
}

#endif
