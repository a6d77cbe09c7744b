// SwiGLU on bf16 arrays with kmath_hd.h's formulas (torch's silu and
// silu_backward): 8 values per thread through 16-byte accesses when every
// array is 16-byte aligned, else one at a time.
#include "kernels/cuda/util.cuh"

static __global__ void swiglu_fwd_k(eng_bf16 *h, const eng_bf16 *g, const eng_bf16 *u, size_t n, int vec) {
  size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
  size_t n8 = vec ? n / 8 : 0;
  for (size_t i = t; i < n8; i += stride) {
    float gf[8], uf[8], hf[8];
    ld_bf16x8(g + 8 * i, gf);
    ld_bf16x8(u + 8 * i, uf);
#pragma unroll
    for (int l = 0; l < 8; l++) hf[l] = eng_km_swiglu(gf[l], uf[l]);
    st_bf16x8(h + 8 * i, hf);
  }
  for (size_t i = 8 * n8 + t; i < n; i += stride) st_bf16(h + i, eng_km_swiglu(ld_bf16(g + i), ld_bf16(u + i)));
}

static __global__ void swiglu_bwd_k(eng_bf16 *dg, eng_bf16 *du, const eng_bf16 *dh, const eng_bf16 *g,
                                    const eng_bf16 *u, size_t n, int vec) {
  size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
  size_t n8 = vec ? n / 8 : 0;
  for (size_t i = t; i < n8; i += stride) {
    float dhf[8], gf[8], uf[8], dgf[8], duf[8];
    ld_bf16x8(dh + 8 * i, dhf);
    ld_bf16x8(g + 8 * i, gf);
    ld_bf16x8(u + 8 * i, uf);
#pragma unroll
    for (int l = 0; l < 8; l++) eng_km_swiglu_bwd(dhf[l], gf[l], uf[l], &dgf[l], &duf[l]);
    st_bf16x8(dg + 8 * i, dgf);
    st_bf16x8(du + 8 * i, duf);
  }
  for (size_t i = 8 * n8 + t; i < n; i += stride) {
    float a, b;
    eng_km_swiglu_bwd(ld_bf16(dh + i), ld_bf16(g + i), ld_bf16(u + i), &a, &b);
    st_bf16(dg + i, a);
    st_bf16(du + i, b);
  }
}

int eng_cuda_swiglu_fwd(eng_bf16 *h, const eng_bf16 *gate, const eng_bf16 *up, size_t n, eng_cuda_stream s,
                        eng_err *e) {
  if (!n) return 0;
  int vec = aligned16(h) && aligned16(gate) && aligned16(up);
  swiglu_fwd_k<<<grid_for(vec ? n / 8 + 1 : n, 256), 256, 0, s>>>(h, gate, up, n, vec);
  ENG_CUDA_LAUNCHED("swiglu_fwd_k", e);
  return 0;
}

int eng_cuda_swiglu_bwd(eng_bf16 *dgate, eng_bf16 *dup, const eng_bf16 *dh, const eng_bf16 *gate, const eng_bf16 *up,
                        size_t n, eng_cuda_stream s, eng_err *e) {
  if (!n) return 0;
  int vec = aligned16(dgate) && aligned16(dup) && aligned16(dh) && aligned16(gate) && aligned16(up);
  swiglu_bwd_k<<<grid_for(vec ? n / 8 + 1 : n, 256), 256, 0, s>>>(dgate, dup, dh, gate, up, n, vec);
  ENG_CUDA_LAUNCHED("swiglu_bwd_k", e);
  return 0;
}
