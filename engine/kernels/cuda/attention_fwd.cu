// Causal GQA attention forward, FlashAttention style: a block owns one
// (sequence, head, 64-query tile) and walks the key tiles up to the
// diagonal (from the first holding a key of its documents, when sequences
// are packed: kernels.h's pos) with an online softmax (kmath_hd.h's eng_km_osm_*), so no T×T
// matrix exists. Per key tile, each warp computes its 16 rows of scores on
// the tensor cores, folds them into the running max/sum (kept in
// registers, identical on every lane), writes bf16 probabilities, rescales
// its rows of the fp32 output accumulator and adds P·V.
#include "kernels/cuda/attention.cuh"

static size_t fwd_smem_bytes(int hd) {
  const size_t ldh = att_ldh(hd), ldo = hd + 4;
  return 3 * ATT_TILE * ldh * 2 + ATT_TILE * ATT_LDS * 4 + ATT_TILE * ATT_LDP * 2 + ATT_TILE * ldo * 4;
}

static __global__ void __launch_bounds__(ATT_THREADS)
attn_fwd_k(eng_bf16 *out, float *lse, const eng_bf16 *q, const eng_bf16 *k, const eng_bf16 *v, const int32_t *pos,
           int T, int H, int KV, int hd, float scale) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ int St[ATT_TILE]; // first key of each query's document
  const int ldh = att_ldh(hd), ldo = hd + 4;
  __nv_bfloat16 *Qs = reinterpret_cast<__nv_bfloat16 *>(smem);
  __nv_bfloat16 *Ks = Qs + ATT_TILE * ldh, *Vs = Ks + ATT_TILE * ldh;
  float *Ss = reinterpret_cast<float *>(Vs + ATT_TILE * ldh);
  __nv_bfloat16 *Ps = reinterpret_cast<__nv_bfloat16 *>(Ss + ATT_TILE * ATT_LDS);
  float *Os = reinterpret_cast<float *>(Ps + ATT_TILE * ATT_LDP);

  const int nt = (T + ATT_TILE - 1) / ATT_TILE;
  const int qt = nt - 1 - blockIdx.x; // the longest rows of the causal triangle start first
  const int bh = blockIdx.y, b = bh / H, h = bh % H, g = h / (H / KV);
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, i0 = qt * ATT_TILE;
  const size_t qs = (size_t)H * hd, ks = (size_t)KV * hd;
  const eng_bf16 *kb = k + (size_t)b * T * ks + (size_t)g * hd, *vb = v + (size_t)b * T * ks + (size_t)g * hd;
  const int32_t *pb = pos ? pos + (size_t)b * T : NULL;

  att_load_tile(Qs, ldh, q + (size_t)b * T * qs + (size_t)h * hd, qs, i0, T, hd);
  if (threadIdx.x < ATT_TILE) St[threadIdx.x] = att_doc_start(pb, i0 + threadIdx.x, T);
  for (int idx = threadIdx.x; idx < ATT_TILE * ldo; idx += ATT_THREADS) Os[idx] = 0.0f;
  float *Sw = Ss + warp * 16 * ATT_LDS, *Ow = Os + warp * 16 * ldo;
  __nv_bfloat16 *Pw = Ps + warp * 16 * ATT_LDP;
  float m[16], l[16], alpha[16];
#pragma unroll
  for (int r = 0; r < 16; r++) m[r] = -INFINITY, l[r] = 0.0f;

  // Key tiles wholly before the earliest document start are skipped.
  const int kt0 = att_doc_start(pb, i0, T) / ATT_TILE;
  for (int kt = kt0; kt <= qt; kt++) {
    const int j0 = kt * ATT_TILE;
    __syncthreads(); // the previous tile's K and V are no longer read
    att_load_tile(Ks, ldh, kb, ks, j0, T, hd);
    att_load_tile(Vs, ldh, vb, ks, j0, T, hd);
    __syncthreads();
    att_mm_abt(Sw, Qs + warp * 16 * ldh, ldh, Ks, ldh, hd);
    __syncwarp();
#pragma unroll
    for (int r = 0; r < 16; r++) {
      // Scaled after the dot product, as transformers does; keys after the
      // query (only the diagonal tile has any) and before its document are
      // masked. A row with no key so far (mn still -inf) weighs its entries
      // against 0 and has nothing to rescale: -inf − -inf would be NaN.
      const int qi = i0 + warp * 16 + r, st = St[warp * 16 + r];
      float s0 = Sw[r * ATT_LDS + lane] * scale, s1 = Sw[r * ATT_LDS + lane + 32] * scale;
      if (j0 + lane > qi || j0 + lane < st) s0 = -INFINITY;
      if (j0 + lane + 32 > qi || j0 + lane + 32 < st) s1 = -INFINITY;
      const float mn = eng_km_osm_max(m[r], warp_max_f(eng_km_osm_max(s0, s1)));
      const float m0 = mn == -INFINITY ? 0.0f : mn;
      const float p0 = eng_km_osm_p(s0, m0), p1 = eng_km_osm_p(s1, m0);
      Pw[r * ATT_LDP + lane] = to_nv_bf16(p0);
      Pw[r * ATT_LDP + lane + 32] = to_nv_bf16(p1);
      alpha[r] = mn == -INFINITY ? 0.0f : eng_km_osm_alpha(m[r], mn);
      l[r] = eng_km_osm_sum(l[r], alpha[r], warp_sum_f(p0 + p1));
      m[r] = mn;
    }
#pragma unroll
    for (int r = 0; r < 16; r++)
      for (int c = lane; c < hd; c += 32) Ow[r * ldo + c] *= alpha[r];
    __syncwarp();
    for (int cb = 0; cb < hd; cb += 16) {
      att_frag_c acc;
      nvcuda::wmma::load_matrix_sync(acc, Ow + cb, ldo, nvcuda::wmma::mem_row_major);
      att_mm_pv(acc, Pw, Vs, ldh, cb);
      nvcuda::wmma::store_matrix_sync(Ow + cb, acc, ldo, nvcuda::wmma::mem_row_major);
    }
    __syncwarp();
  }

#pragma unroll
  for (int r = 0; r < 16; r++) {
    const int qi = i0 + warp * 16 + r;
    if (qi >= T) continue;
    eng_bf16 *o = out + ((size_t)b * T + qi) * qs + (size_t)h * hd;
    for (int c = lane; c < hd; c += 32) st_bf16(o + c, Ow[r * ldo + c] / l[r]);
    if (lane == 0) lse[(size_t)bh * T + qi] = eng_km_osm_lse(m[r], l[r]);
  }
}

int eng_cuda_attention_fwd(eng_bf16 *out, float *lse, const eng_bf16 *q, const eng_bf16 *k, const eng_bf16 *v,
                           const int32_t *pos, int B, int T, int H, int KV, int hd, eng_cuda_stream s, eng_err *e) {
  int rc = att_check(B, T, H, KV, hd, e);
  if (rc) return rc;
  ENG_CUDA_REQUIRE(aligned16(out) && aligned16(q) && aligned16(k) && aligned16(v), e,
                   "attention: q, k, v and out must be 16-byte aligned");
  if (B <= 0 || T <= 0) return 0;
  const size_t smem = fwd_smem_bytes(hd);
  ENG_CUDA_TRY(cudaFuncSetAttribute(attn_fwd_k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem), e);
  const int nt = (T + ATT_TILE - 1) / ATT_TILE;
  attn_fwd_k<<<dim3(nt, B * H), ATT_THREADS, smem, s>>>(out, lse, q, k, v, pos, T, H, KV, hd,
                                                        1.0f / sqrtf((float)hd));
  ENG_CUDA_LAUNCHED("attn_fwd_k", e);
  return 0;
}
