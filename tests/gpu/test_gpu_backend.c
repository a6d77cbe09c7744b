// The cuda backend against backend.h's contract: opening (and the refusal of
// a device that does not exist), the hard cap, an arena of cudaMalloc'ed
// memory carved like the cpu one, copies in and out through pinned staging
// (pageable memory, several slabs) and directly (pinned and registered
// memory), byte counters, copies ordered after compute (plain and after a
// mark), and kernels on the backend's own context.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef TRAIND_HAVE_CUDA
int main(void) {
  fprintf(stderr, "test_gpu_backend: SKIP: this build has no CUDA backend\n");
  return 77;
}
#else

#include "backend/cuda.h"
#include "gpu_test.h"

static eng_err err;

static void fill(unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)((i * 2654435761u + seed) >> 13);
}

// Round trip of n bytes through the arena from and to host buffers of the
// given kinds; checks the bytes and the counters.
static void round_trip(eng_dev *d, void *arena, unsigned char *src, unsigned char *dst, size_t n, const char *what) {
  uint64_t in0 = d->bytes_in, out0 = d->bytes_out;
  fill(src, n, (unsigned)n);
  memset(dst, 0, n);
  d->ops->copy_in(d, arena, src, n);
  d->ops->copy_out(d, dst, arena, n);
  CHECK_OK(eng_dev_cuda_sync(d, &err), &err);
  CHECK(memcmp(src, dst, n) == 0, "%s: %zu bytes came back different", what, n);
  CHECK(d->bytes_in - in0 == n && d->bytes_out - out0 == n, "%s: counters moved by %llu and %llu", what,
        (unsigned long long)(d->bytes_in - in0), (unsigned long long)(d->bytes_out - out0));
  printf("  %-40s ok\n", what);
}

int main(void) {
  gpu_require("test_gpu_backend");
  eng_dev *d = NULL;
  CHECK(eng_dev_open_cuda(&d, 99, 0, &err) == ENG_EINVAL && !d, "cuda:99 opened or failed with the wrong code");
  printf("  %-40s %s\n", "cuda:99 refused", err.msg);

  const size_t cap = (size_t)256 << 20;
  CHECK_OK(eng_dev_open_cuda(&d, 0, cap, &err), &err);
  CHECK(!strcmp(d->name, "cuda:0") && !d->host_compute && d->cap == cap, "open: name %s, host_compute %d, cap %zu",
        d->name, d->host_compute, d->cap);
  CHECK(eng_dev_reserve(d, cap + 1, "the test", &err) == ENG_ECAP, "a reservation over the cap was accepted");
  printf("  %-40s %s\n", "over the cap refused", err.msg);

  const size_t big = (size_t)80 << 20; // several 32 MiB staging slabs
  CHECK_OK(eng_dev_reserve(d, (size_t)200 << 20, "the test", &err), &err);
  char *a = eng_dev_alloc(d, big), *b = eng_dev_alloc(d, 1000);
  CHECK(a && b && b == a + big && ((uintptr_t)a & 255) == 0, "arena carving is off");
  CHECK(!eng_dev_alloc(d, (size_t)200 << 20), "the arena handed out more than it has");
  struct cudaPointerAttributes at;
  CUDA_OK(cudaPointerGetAttributes(&at, a));
  CHECK(at.type == cudaMemoryTypeDevice, "the arena is not device memory (type %d)", (int)at.type);

  unsigned char *src = malloc(big), *dst = malloc(big);
  round_trip(d, a, src, dst, big, "pageable, 80 MiB (staged)");
  round_trip(d, b, src, dst, 1000, "pageable, 1000 bytes");
  void *ps, *pd;
  CHECK_OK(eng_dev_cuda_host_alloc(d, &ps, big, &err), &err);
  CHECK_OK(eng_dev_cuda_host_alloc(d, &pd, big, &err), &err);
  round_trip(d, a, ps, pd, big, "pinned (cudaHostAlloc), 80 MiB");
  CHECK_OK(eng_dev_cuda_pin(d, src, big, &err), &err);
  CHECK_OK(eng_dev_cuda_pin(d, dst, big, &err), &err);
  round_trip(d, a, src, dst, big, "registered (cudaHostRegister), 80 MiB");
  eng_dev_cuda_unpin(d, src);
  eng_dev_cuda_unpin(d, dst);

  // Compute queued before a copy-out lands in it: a zeroing kernel on the
  // compute stream, then a plain copy and a copy after a mark.
  eng_cuda_stream cs = eng_dev_cuda_stream(d, ENG_CUDA_STREAM_COMPUTE);
  CHECK(cs && cs != eng_dev_cuda_stream(d, ENG_CUDA_STREAM_COPY_IN) &&
            eng_dev_cuda_stream(d, ENG_CUDA_STREAM_COPY_IN) != eng_dev_cuda_stream(d, ENG_CUDA_STREAM_COPY_OUT),
        "the three streams are not distinct");
  CHECK_OK(eng_cuda_zero(a, big, cs, &err), &err);
  memset(dst, 1, big);
  d->ops->copy_out(d, dst, a, big);
  for (size_t i = 0; i < big; i++) CHECK(dst[i] == 0, "copy-out ran before the compute queued ahead of it");
  eng_cuda_mark m;
  CHECK_OK(eng_dev_cuda_mark_init(d, &m, &err), &err);
  d->ops->copy_in(d, a, src, big);
  CHECK_OK(eng_cuda_bf16_from_f32((eng_bf16 *)b, (const float *)a, 250, cs, &err), &err);
  CHECK_OK(eng_dev_cuda_mark(d, &m, &err), &err);
  uint16_t got[250];
  eng_dev_cuda_copy_out_after(d, &m, got, b, sizeof got);
  for (int i = 0; i < 250; i++) {
    float f;
    memcpy(&f, src + 4 * i, 4);
    CHECK(got[i] == eng_km_bf16_from_f32(f), "copy-out after a mark read %#06x at %d", got[i], i);
  }
  eng_dev_cuda_mark_free(&m);
  printf("  %-40s ok\n", "copies wait for queued compute");

  // The backend's kernel context runs a GEMM on the compute stream.
  eng_cuda_ctx *cx = eng_dev_cuda_ctx(d);
  CHECK(cx && eng_cuda_ctx_stream(cx) == cs, "the context is not on the compute stream");
  uint16_t one = eng_km_bf16_from_f32(1.0f), ones[64 * 64];
  for (int i = 0; i < 64 * 64; i++) ones[i] = one;
  d->ops->copy_in(d, a, ones, sizeof ones);
  CHECK_OK(eng_cuda_linear_fwd(cx, (eng_bf16 *)b, (eng_bf16 *)a, (eng_bf16 *)a, NULL, NULL, 4, 64, 64, &err), &err);
  uint16_t y[4 * 64];
  d->ops->copy_out(d, y, b, sizeof y);
  for (int i = 0; i < 4 * 64; i++) CHECK(eng_km_bf16_to_f32(y[i]) == 64.0f, "ones·onesᵀ gave %g", eng_km_bf16_to_f32(y[i]));
  CHECK_OK(eng_dev_cuda_sync(d, &err), &err);
  printf("  %-40s ok\n", "a GEMM on the backend's context");

  eng_dev_cuda_host_free(ps);
  eng_dev_cuda_host_free(pd);
  free(src), free(dst);
  eng_dev_close(d);
  printf("gpu backend: ok\n");
  return 0;
}

#endif
