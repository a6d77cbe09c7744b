// Rotary embedding in place on bf16 [B*T, heads, hd]: one thread per rotated
// pair of a head's first rd values, by the caller's table (kernels.h's
// eng_k_rope, from model/rope.h on the host, so device and host rotate by the
// same frequencies), the angle as transformers computes it (kmath_hd.h),
// cos/sin from CUDA's accurate sinf/cosf (not the fast intrinsics), times the
// table's scale. A row's position is pos[row] (rows are b·T + t, as pos is
// laid out), or t.
#include "kernels/cuda/util.cuh"
#include "kernels/kernels.h"

// The table travels as a kernel argument.
static __global__ void rope_k(eng_bf16 *x, const int32_t *pos, int T, int heads, int hd, eng_k_rope r, float sign,
                              size_t pairs) {
  const int h2 = r.rd / 2;
  for (size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x; p < pairs; p += (size_t)gridDim.x * blockDim.x) {
    int i = (int)(p % h2);
    size_t rh = p / h2; // row * heads + head
    size_t row = rh / heads;
    int t = pos ? pos[row] : (int)(row % T);
    float a = eng_km_rope_angle(t, r.inv_freq[i]);
    float c = cosf(a) * r.scale, s = sign * (sinf(a) * r.scale);
    eng_bf16 *x1 = x + rh * hd + i, *x2 = x1 + h2;
    float u = ld_bf16(x1), v = ld_bf16(x2);
    st_bf16(x1, eng_km_rope_lo(u, v, c, s));
    st_bf16(x2, eng_km_rope_hi(u, v, c, s));
  }
}

static int rope(eng_bf16 *x, const int32_t *pos, int B, int T, int heads, int hd, const eng_k_rope *r, float sign,
                eng_cuda_stream s, eng_err *e) {
  ENG_CUDA_REQUIRE(r->rd % 2 == 0 && r->rd > 0 && r->rd <= hd && hd <= ENG_K_MAX_HD, e,
                   "rope: %d rotated dims of head_dim %d (even, at most head_dim, head_dim at most %d)", r->rd, hd,
                   ENG_K_MAX_HD);
  size_t pairs = (size_t)B * T * heads * (r->rd / 2);
  if (!pairs) return 0;
  rope_k<<<grid_for(pairs, 256), 256, 0, s>>>(x, pos, T, heads, hd, *r, sign, pairs);
  ENG_CUDA_LAUNCHED("rope_k", e);
  return 0;
}

int eng_cuda_rope_fwd(eng_bf16 *x, const int32_t *pos, int B, int T, int heads, int hd, const eng_k_rope *r,
                      eng_cuda_stream s, eng_err *e) {
  return rope(x, pos, B, T, heads, hd, r, 1.0f, s, e);
}

int eng_cuda_rope_bwd(eng_bf16 *dx, const int32_t *pos, int B, int T, int heads, int hd, const eng_k_rope *r,
                      eng_cuda_stream s, eng_err *e) {
  return rope(dx, pos, B, T, heads, hd, r, -1.0f, s, e);
}
