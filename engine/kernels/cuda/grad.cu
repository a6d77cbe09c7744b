// A layer's gradient leaves the device: the fp32 accumulator becomes the
// bf16 values that cross PCIe, and its Σ g² is reduced on the way with the
// block structure of the host's eng_bf16_sumsq / eng_k_sumsq: blocks of
// 4096 values, 8 interleaved partial sums per block (lane l takes the
// values l, l+8, ... in order) combined by eng_km_sum8_tree, then the blocks
// added in order. Each square is exact in double and IEEE addition rounds
// the same on both sides, so the device's sum is the host's to the bit.
#include "kernels/cuda/util.cuh"

enum { BLOCK = ENG_CUDA_GRAD_BLOCK, LANES = 8 };

// One thread per (block, lane): 8 consecutive threads own one block.
static __global__ void grad_finish_k(eng_bf16 *out, double *part, const float *acc, size_t n) {
  size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  size_t blk = t / LANES, nblk = (n + BLOCK - 1) / BLOCK;
  int lane = (int)(t % LANES);
  double sum = 0.0;
  if (blk < nblk) {
    size_t i0 = blk * BLOCK, i1 = i0 + BLOCK < n ? i0 + BLOCK : n;
    for (size_t i = i0 + lane; i < i1; i += LANES) {
      float g = acc[i];
      if (out) {
        eng_bf16 h = eng_km_bf16_from_f32(g);
        out[i] = h;
        g = eng_km_bf16_to_f32(h);
      }
      sum += (double)g * (double)g;
    }
  }
  // The 8 lanes of a block are adjacent lanes of one warp (blockDim is a
  // multiple of 32): gather them in lane order and combine in the tree.
  double v[LANES];
  int base = (threadIdx.x & 31) & ~(LANES - 1);
#pragma unroll
  for (int l = 0; l < LANES; l++) v[l] = __shfl_sync(0xffffffffu, sum, base + l);
  if (lane == 0 && blk < nblk) part[blk] = eng_km_sum8_tree(v);
}

// Blocks in order, by one thread: the order is the host's.
static __global__ void grad_sum_blocks_k(double *sumsq, const double *part, size_t nblk) {
  double total = 0.0;
  for (size_t b = 0; b < nblk; b++) total += part[b];
  *sumsq = total;
}

int eng_cuda_grad_finish(eng_bf16 *out, double *sumsq, const float *acc, size_t n, void *scratch,
                         eng_cuda_stream s, eng_err *e) {
  size_t nblk = (n + BLOCK - 1) / BLOCK;
  if (nblk) {
    size_t threads = nblk * LANES;
    grad_finish_k<<<(unsigned)((threads + 255) / 256), 256, 0, s>>>(out, (double *)scratch, acc, n);
    ENG_CUDA_LAUNCHED("grad_finish_k", e);
  }
  grad_sum_blocks_k<<<1, 1, 0, s>>>(sumsq, (const double *)scratch, nblk);
  ENG_CUDA_LAUNCHED("grad_sum_blocks_k", e);
  return 0;
}
