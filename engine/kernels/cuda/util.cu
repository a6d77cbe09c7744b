// Error reporting, stream sync, zeroing, copies and device discovery for the
// cuda kernels.
#include "kernels/cuda/util.cuh"

int eng_cuda_fail(eng_err *e, cudaError_t st, const char *call, const char *file, int line) {
  return eng_err_set(e, ENG_EDEVICE, "%s:%d: %s failed: %s (%s)", file, line, call, cudaGetErrorString(st),
                     cudaGetErrorName(st));
}

int eng_cuda_stream_sync(eng_cuda_stream s, eng_err *e) {
  ENG_CUDA_TRY(cudaStreamSynchronize(s), e);
  ENG_CUDA_TRY(cudaGetLastError(), e);
  return 0;
}

int eng_cuda_zero(void *p, size_t bytes, eng_cuda_stream s, eng_err *e) {
  if (bytes) ENG_CUDA_TRY(cudaMemsetAsync(p, 0, bytes, s), e);
  return 0;
}

int eng_cuda_copy(void *dst, const void *src, size_t bytes, eng_cuda_stream s, eng_err *e) {
  if (bytes) ENG_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s), e);
  return 0;
}

int eng_cuda_device_count(eng_err *e) {
  int n = 0;
  cudaError_t st = cudaGetDeviceCount(&n);
  if (st != cudaSuccess) {
    cudaGetLastError(); // not sticky: clear it so later calls start clean
    return eng_err_set(e, ENG_EDEVICE, "no CUDA device: %s", cudaGetErrorString(st));
  }
  return n;
}
