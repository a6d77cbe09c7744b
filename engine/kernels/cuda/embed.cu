// Token embedding: a gather of bf16 rows, and its scatter-add backward into
// an fp32 table gradient. The backward gives each column to one thread,
// which adds the rows in i order: a token that repeats accumulates in the
// same order every run, with no atomics. Its parallelism is d threads,
// enough for one pass per step.
#include "kernels/cuda/util.cuh"

static __global__ void embed_fwd_k(eng_bf16 *x, const eng_bf16 *table, const int32_t *ids, int n, int d, int vocab) {
  size_t total = (size_t)n * d;
  for (size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x; p < total; p += (size_t)gridDim.x * blockDim.x) {
    size_t i = p / d, j = p % d;
    int32_t id = ids[i];
    x[p] = id >= 0 && id < vocab ? table[(size_t)id * d + j] : (eng_bf16)0;
  }
}

static __global__ void embed_bwd_k(float *dtable, const eng_bf16 *dx, const int32_t *ids, int n, int d, int vocab) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= d) return;
  for (int i = 0; i < n; i++) {
    int32_t id = ids[i];
    if (id >= 0 && id < vocab) dtable[(size_t)id * d + j] += ld_bf16(dx + (size_t)i * d + j);
  }
}

int eng_cuda_embed_fwd(eng_bf16 *x, const eng_bf16 *table, const int32_t *ids, int n, int d, int vocab,
                       eng_cuda_stream s, eng_err *e) {
  if (n <= 0 || d <= 0) return 0;
  embed_fwd_k<<<grid_for((size_t)n * d, 256), 256, 0, s>>>(x, table, ids, n, d, vocab);
  ENG_CUDA_LAUNCHED("embed_fwd_k", e);
  return 0;
}

int eng_cuda_embed_bwd(float *dtable, const eng_bf16 *dx, const int32_t *ids, int n, int d, int vocab,
                       eng_cuda_stream s, eng_err *e) {
  if (n <= 0 || d <= 0) return 0;
  embed_bwd_k<<<(d + 127) / 128, 128, 0, s>>>(dtable, dx, ids, n, d, vocab);
  ENG_CUDA_LAUNCHED("embed_bwd_k", e);
  return 0;
}
