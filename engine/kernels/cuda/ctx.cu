// eng_cuda_ctx: cuBLASLt, its workspace and the column-sum scratch, bound to
// one stream. Allocated once, outside the arena, so no kernel allocates.
#include <stdlib.h>

#include "kernels/cuda/ctx.cuh"

size_t eng_cuda_ctx_device_bytes(void) { return ENG_CUDA_GEMM_WS_BYTES + ENG_CUDA_RED_BYTES; }

eng_cuda_stream eng_cuda_ctx_stream(const eng_cuda_ctx *cx) { return cx->stream; }

int eng_cuda_ctx_open(eng_cuda_ctx **out, eng_cuda_stream s, eng_err *e) {
  *out = NULL;
  eng_cuda_ctx *cx = (eng_cuda_ctx *)calloc(1, sizeof *cx);
  if (!cx) return eng_err_set(e, ENG_ENOMEM, "cannot allocate the cuda kernel context");
  cx->stream = s;
  int rc = 0;
  cublasStatus_t bs = cublasLtCreate(&cx->lt);
  if (bs != CUBLAS_STATUS_SUCCESS) {
    cx->lt = NULL;
    rc = eng_err_set(e, ENG_EDEVICE, "%s:%d: cublasLtCreate failed: %s", __FILE__, __LINE__,
                     cublasLtGetStatusString(bs));
  }
  cudaError_t st = cudaSuccess;
  if (!rc && (st = cudaMalloc(&cx->ws, ENG_CUDA_GEMM_WS_BYTES)) != cudaSuccess) cx->ws = NULL;
  if (!rc && st == cudaSuccess && (st = cudaMalloc((void **)&cx->red, ENG_CUDA_RED_BYTES)) != cudaSuccess)
    cx->red = NULL;
  if (!rc && st != cudaSuccess)
    rc = eng_cuda_fail(e, st, "cudaMalloc of the cuBLASLt workspace and reduction scratch", __FILE__, __LINE__);
  if (rc) {
    eng_cuda_ctx_close(cx);
    return rc;
  }
  *out = cx;
  return 0;
}

void eng_cuda_ctx_close(eng_cuda_ctx *cx) {
  if (!cx) return;
  // Work queued with the workspace must end before it is freed.
  cudaStreamSynchronize(cx->stream);
  eng_cuda_gemm_cache_clear(cx);
  if (cx->lt) cublasLtDestroy(cx->lt);
  cudaFree(cx->ws);
  cudaFree(cx->red);
  free(cx);
}
