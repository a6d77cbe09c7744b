// Column sums for weight gradients of vectors (norm weights, biases):
// out[j] += Σ_i term(i, j) over n rows, deterministically and without
// atomics. Rows are cut into fixed chunks; one thread per (chunk, column)
// sums its chunk in row order in double, then one thread per column adds
// the chunks in order and rounds once to fp32. The chunk length depends on
// n and d only, never on the launch, so the bits are fixed by the inputs.
#ifndef ENG_KERNELS_CUDA_COLSUM_CUH
#define ENG_KERNELS_CUDA_COLSUM_CUH

#include "kernels/cuda/ctx.cuh"

template <class Term>
__global__ void colsum_part_k(double *part, int n, int d, int chunk, Term term) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= d) return;
  int i0 = blockIdx.y * chunk, i1 = min(n, i0 + chunk);
  double acc = 0.0;
  for (int i = i0; i < i1; i++) acc += term(i, j);
  part[(size_t)blockIdx.y * d + j] = acc;
}

static __global__ void colsum_finish_k(float *out, const double *part, int nchunks, int d) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= d) return;
  double acc = 0.0;
  for (int c = 0; c < nchunks; c++) acc += part[(size_t)c * d + j];
  out[j] += (float)acc;
}

// Runs on cx's stream with cx's reduction scratch.
template <class Term>
static int eng_cuda_colsum(eng_cuda_ctx *cx, float *out, int n, int d, Term term, eng_err *e) {
  if (n <= 0 || d <= 0) return 0;
  size_t max_chunks = ENG_CUDA_RED_BYTES / (sizeof(double) * (size_t)d);
  ENG_CUDA_REQUIRE(max_chunks > 0, e, "column sum over %d columns exceeds the reduction scratch", d);
  // 64 rows a chunk keeps a GPU busy at d = 128 and n = a few thousand;
  // doubled while the partials would not fit (or the grid's y limit).
  int chunk = 64;
  while ((size_t)((n + chunk - 1) / chunk) > max_chunks || (n + chunk - 1) / chunk > 65535) chunk *= 2;
  int nchunks = (n + chunk - 1) / chunk;
  colsum_part_k<<<dim3((d + 127) / 128, nchunks), 128, 0, cx->stream>>>(cx->red, n, d, chunk, term);
  ENG_CUDA_LAUNCHED("colsum_part_k", e);
  colsum_finish_k<<<(d + 127) / 128, 128, 0, cx->stream>>>(out, cx->red, nchunks, d);
  ENG_CUDA_LAUNCHED("colsum_finish_k", e);
  return 0;
}

#endif
