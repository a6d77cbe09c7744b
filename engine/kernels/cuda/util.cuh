// Internal helpers of the cuda kernels: error reporting with file:line,
// bf16 loads and stores through the shared rounding, warp reductions and
// launch sizes.
#ifndef ENG_KERNELS_CUDA_UTIL_CUH
#define ENG_KERNELS_CUDA_UTIL_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/cuda/kernels_cuda.h"
#include "kernels/kmath_hd.h"

// Fills e with "file:line: call failed: reason" and returns ENG_EDEVICE.
int eng_cuda_fail(eng_err *e, cudaError_t st, const char *call, const char *file, int line);

#define ENG_CUDA_TRY(call, e)                                                      \
  do {                                                                             \
    cudaError_t st_ = (call);                                                      \
    if (st_ != cudaSuccess) return eng_cuda_fail((e), st_, #call, __FILE__, __LINE__); \
  } while (0)

// After a <<<...>>> launch of kernel `name` (a string literal): a refused
// launch (bad configuration, too much shared memory, a sticky error of
// earlier work) is reported here.
#define ENG_CUDA_LAUNCHED(name, e)                                                 \
  do {                                                                             \
    cudaError_t st_ = cudaGetLastError();                                          \
    if (st_ != cudaSuccess) return eng_cuda_fail((e), st_, "launch of " name, __FILE__, __LINE__); \
  } while (0)

#define ENG_CUDA_REQUIRE(cond, e, ...)                                             \
  do {                                                                             \
    if (!(cond)) return eng_err_set((e), ENG_EINVAL, __VA_ARGS__);                 \
  } while (0)

// bf16 <-> fp32 with the host's rounding rule (kmath_hd.h).
static __device__ __forceinline__ float ld_bf16(const eng_bf16 *p) { return eng_km_bf16_to_f32(*p); }
static __device__ __forceinline__ void st_bf16(eng_bf16 *p, float v) { *p = eng_km_bf16_from_f32(v); }
static __device__ __forceinline__ __nv_bfloat16 to_nv_bf16(float v) {
  return __ushort_as_bfloat16(eng_km_bf16_from_f32(v));
}

// Eight consecutive bf16 as one 16-byte access (p 16-byte aligned).
static __device__ __forceinline__ void ld_bf16x8(const eng_bf16 *p, float f[8]) {
  uint4 v = *reinterpret_cast<const uint4 *>(p);
  uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; i++) {
    f[2 * i] = eng_km_from_bits(w[i] << 16);
    f[2 * i + 1] = eng_km_from_bits(w[i] & 0xffff0000u);
  }
}

static __device__ __forceinline__ void st_bf16x8(eng_bf16 *p, const float f[8]) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; i++)
    w[i] = (uint32_t)eng_km_bf16_from_f32(f[2 * i]) | ((uint32_t)eng_km_bf16_from_f32(f[2 * i + 1]) << 16);
  *reinterpret_cast<uint4 *>(p) = make_uint4(w[0], w[1], w[2], w[3]);
}

static inline bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

// Butterfly reductions: every lane ends with the same value, since each step
// adds the same two operands on both lanes of a pair (addition commutes).
static __device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

static __device__ __forceinline__ float warp_sum_f(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

static __device__ __forceinline__ float warp_max_f(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = eng_km_osm_max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Blocks for a grid-stride loop over n items with `threads` per block: one
// item per thread up to 4096 blocks (over a million threads, enough to fill
// any current GPU), then each thread takes several.
static inline unsigned grid_for(size_t n, unsigned threads) {
  size_t b = (n + threads - 1) / threads;
  return (unsigned)(b == 0 ? 1 : b < 4096 ? b : 4096);
}

#endif
