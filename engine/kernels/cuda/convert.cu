// bf16 <-> fp32 over device arrays, with the host's rounding rule.
#include "kernels/cuda/util.cuh"

static __global__ void bf16_from_f32_k(eng_bf16 *dst, const float *src, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    dst[i] = eng_km_bf16_from_f32(src[i]);
}

static __global__ void bf16_to_f32_k(float *dst, const eng_bf16 *src, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    dst[i] = eng_km_bf16_to_f32(src[i]);
}

int eng_cuda_bf16_from_f32(eng_bf16 *dst, const float *src, size_t n, eng_cuda_stream s, eng_err *e) {
  if (!n) return 0;
  bf16_from_f32_k<<<grid_for(n, 256), 256, 0, s>>>(dst, src, n);
  ENG_CUDA_LAUNCHED("bf16_from_f32_k", e);
  return 0;
}

int eng_cuda_bf16_to_f32(float *dst, const eng_bf16 *src, size_t n, eng_cuda_stream s, eng_err *e) {
  if (!n) return 0;
  bf16_to_f32_k<<<grid_for(n, 256), 256, 0, s>>>(dst, src, n);
  ENG_CUDA_LAUNCHED("bf16_to_f32_k", e);
  return 0;
}
