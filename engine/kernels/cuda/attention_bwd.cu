// Causal GQA attention backward, FlashAttention-2 style: P is recomputed
// from q, k and the saved lse one tile at a time, with D = rowsum(dO∘O):
//   dV = Σ Pᵀ·dO, dP = dO·Vᵀ, dS = P∘(dP − D)·scale, dQ = Σ dS·K, dK = Σ dSᵀ·Q
// (kmath_hd.h's eng_km_attn_p / eng_km_attn_ds per element). Without
// atomics, dQ and dK/dV come from two kernels that each own their output:
// one block per (sequence, head, query tile) walks the key tiles for dQ;
// one block per (sequence, kv head, key tile) walks the query heads of its
// group and their query tiles, in a fixed order, for dK and dV. That costs
// the S and dP products twice, and buys results that repeat to the bit.
// With packed sequences (kernels.h's pos) both visit only the tiles the
// forward did: dQ's walk starts at the first key tile of its documents, dK/dV's
// ends before the first query tile whose documents all start after its keys.
// Accumulators live in WMMA fragments (registers) for the whole walk.
#include "kernels/cuda/attention.cuh"

enum { MAX_CB = ENG_CUDA_MAX_HD / 16 }; // accumulator fragments per 16 rows

// D[b,h,t] = Σ_c dO·O in fp32 (fmaf lanes, then the warp's tree): one warp
// per [B,T,H] row.
static __global__ void attn_bwd_D_k(float *D, const eng_bf16 *dout, const eng_bf16 *out, int T, int H, int hd,
                                    size_t rows) {
  size_t row = (size_t)blockIdx.x * 8 + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const eng_bf16 *o = out + row * hd, *dO = dout + row * hd;
  float acc = 0.0f;
  for (int c = lane; c < hd; c += 32) acc = fmaf(ld_bf16(dO + c), ld_bf16(o + c), acc);
  acc = warp_sum_f(acc);
  if (lane == 0) {
    size_t b = row / ((size_t)T * H), t = (row / H) % T, h = row % H;
    D[(b * H + h) * T + t] = acc;
  }
}

// Writes a warp's 16×16 fp32 block (staged at pitch ATT_LDS) as bf16 rows
// row0.. of dst (rows `stride` apart), skipping rows at or past T.
static __device__ __forceinline__ void att_store_block(eng_bf16 *dst, size_t stride, int row0, int T,
                                                       const float *stage) {
  const int lane = threadIdx.x & 31;
  for (int idx = lane; idx < 256; idx += 32) {
    int r = idx / 16, c = idx % 16;
    if (row0 + r < T) st_bf16(dst + (size_t)(row0 + r) * stride + c, stage[r * ATT_LDS + c]);
  }
}

// Shared memory of both kernels: four bf16 tiles of head vectors, one fp32
// score tile, two bf16 tiles of probabilities/gradients, 128 floats and 64
// ints.
static size_t bwd_smem_bytes(int hd) {
  return 4 * (size_t)ATT_TILE * att_ldh(hd) * 2 + ATT_TILE * ATT_LDS * 4 + 2 * ATT_TILE * ATT_LDP * 2 +
         2 * ATT_TILE * 4 + ATT_TILE * 4;
}

struct bwd_smem {
  __nv_bfloat16 *A, *B, *C, *Dt; // four head-vector tiles
  float *S;                       // scores, then dP
  __nv_bfloat16 *P, *dS;
  float *L, *Dv;                  // lse and D of a query tile (dK/dV kernel)
  int *St;                        // first key of each query's document (att_doc_start)
};

static __device__ bwd_smem bwd_carve(unsigned char *smem, int hd) {
  const int ldh = att_ldh(hd);
  bwd_smem m;
  m.A = reinterpret_cast<__nv_bfloat16 *>(smem);
  m.B = m.A + ATT_TILE * ldh;
  m.C = m.B + ATT_TILE * ldh;
  m.Dt = m.C + ATT_TILE * ldh;
  m.S = reinterpret_cast<float *>(m.Dt + ATT_TILE * ldh);
  m.P = reinterpret_cast<__nv_bfloat16 *>(m.S + ATT_TILE * ATT_LDS);
  m.dS = m.P + ATT_TILE * ATT_LDP;
  m.L = reinterpret_cast<float *>(m.dS + ATT_TILE * ATT_LDP);
  m.Dv = m.L + ATT_TILE;
  m.St = reinterpret_cast<int *>(m.Dv + ATT_TILE);
  return m;
}

// dQ of one (sequence, head, query tile).
static __global__ void __launch_bounds__(ATT_THREADS)
attn_bwd_dq_k(eng_bf16 *dq, const eng_bf16 *dout, const float *lse, const float *D, const eng_bf16 *q,
              const eng_bf16 *k, const eng_bf16 *v, const int32_t *pos, int T, int H, int KV, int hd, float scale) {
  extern __shared__ __align__(128) unsigned char smem[];
  const bwd_smem sm = bwd_carve(smem, hd);
  const int ldh = att_ldh(hd), ncb = hd / 16;
  __nv_bfloat16 *Qs = sm.A, *dOs = sm.B, *Ks = sm.C, *Vs = sm.Dt;
  const int nt = (T + ATT_TILE - 1) / ATT_TILE;
  const int qt = nt - 1 - blockIdx.x;
  const int bh = blockIdx.y, b = bh / H, h = bh % H, g = h / (H / KV);
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, i0 = qt * ATT_TILE;
  const size_t qs = (size_t)H * hd, ks = (size_t)KV * hd;
  const size_t qoff = (size_t)b * T * qs + (size_t)h * hd, koff = (size_t)b * T * ks + (size_t)g * hd;
  const int32_t *pb = pos ? pos + (size_t)b * T : NULL;

  att_load_tile(Qs, ldh, q + qoff, qs, i0, T, hd);
  att_load_tile(dOs, ldh, dout + qoff, qs, i0, T, hd);
  if (threadIdx.x < ATT_TILE) sm.St[threadIdx.x] = att_doc_start(pb, i0 + threadIdx.x, T);
  float L[16], Dr[16];
#pragma unroll
  for (int r = 0; r < 16; r++) {
    const int qi = i0 + warp * 16 + r;
    L[r] = qi < T ? lse[(size_t)bh * T + qi] : 0.0f;
    Dr[r] = qi < T ? D[(size_t)bh * T + qi] : 0.0f;
  }
  float *Sw = sm.S + warp * 16 * ATT_LDS;
  __nv_bfloat16 *dSw = sm.dS + warp * 16 * ATT_LDP;
  att_frag_c acc[MAX_CB];
#pragma unroll
  for (int cb = 0; cb < MAX_CB; cb++) nvcuda::wmma::fill_fragment(acc[cb], 0.0f);

  // Key tiles wholly before the earliest document start are skipped.
  const int kt0 = att_doc_start(pb, i0, T) / ATT_TILE;
  for (int kt = kt0; kt <= qt; kt++) {
    const int j0 = kt * ATT_TILE;
    __syncthreads();
    att_load_tile(Ks, ldh, k + koff, ks, j0, T, hd);
    att_load_tile(Vs, ldh, v + koff, ks, j0, T, hd);
    __syncthreads();
    // P from S, kept in registers while S's buffer takes dP.
    att_mm_abt(Sw, Qs + warp * 16 * ldh, ldh, Ks, ldh, hd);
    __syncwarp();
    float p[16][2];
#pragma unroll
    for (int r = 0; r < 16; r++) {
      const int qi = i0 + warp * 16 + r, st = sm.St[warp * 16 + r];
#pragma unroll
      for (int u = 0; u < 2; u++) {
        const int c = lane + 32 * u;
        p[r][u] = j0 + c > qi || j0 + c < st || qi >= T ? 0.0f : eng_km_attn_p(Sw[r * ATT_LDS + c], scale, L[r]);
      }
    }
    __syncwarp();
    att_mm_abt(Sw, dOs + warp * 16 * ldh, ldh, Vs, ldh, hd);
    __syncwarp();
#pragma unroll
    for (int r = 0; r < 16; r++)
#pragma unroll
      for (int u = 0; u < 2; u++) {
        const int c = lane + 32 * u;
        dSw[r * ATT_LDP + c] = to_nv_bf16(eng_km_attn_ds(p[r][u], Sw[r * ATT_LDS + c], Dr[r], scale));
      }
    __syncwarp();
#pragma unroll
    for (int cb = 0; cb < MAX_CB; cb++)
      if (cb < ncb) att_mm_pv(acc[cb], dSw, Ks, ldh, cb * 16);
  }

  eng_bf16 *dqb = dq + qoff;
#pragma unroll
  for (int cb = 0; cb < MAX_CB; cb++)
    if (cb < ncb) {
      __syncwarp();
      nvcuda::wmma::store_matrix_sync(Sw, acc[cb], ATT_LDS, nvcuda::wmma::mem_row_major);
      __syncwarp();
      att_store_block(dqb + cb * 16, qs, i0 + warp * 16, T, Sw);
    }
}

// dK and dV of one (sequence, kv head, key tile).
static __global__ void __launch_bounds__(ATT_THREADS)
attn_bwd_dkv_k(eng_bf16 *dk, eng_bf16 *dv, const eng_bf16 *dout, const float *lse, const float *D,
               const eng_bf16 *q, const eng_bf16 *k, const eng_bf16 *v, const int32_t *pos, int T, int H, int KV,
               int hd, float scale) {
  extern __shared__ __align__(128) unsigned char smem[];
  const bwd_smem sm = bwd_carve(smem, hd);
  const int ldh = att_ldh(hd), ncb = hd / 16, G = H / KV;
  __nv_bfloat16 *Ks = sm.A, *Vs = sm.B, *Qs = sm.C, *dOs = sm.Dt;
  const int nt = (T + ATT_TILE - 1) / ATT_TILE;
  const int kt = blockIdx.x; // the first key tiles see the most queries: they start first
  const int bg = blockIdx.y, b = bg / KV, g = bg % KV;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, j0 = kt * ATT_TILE;
  const size_t qs = (size_t)H * hd, ks = (size_t)KV * hd;
  const size_t koff = (size_t)b * T * ks + (size_t)g * hd;
  const int32_t *pb = pos ? pos + (size_t)b * T : NULL;

  att_load_tile(Ks, ldh, k + koff, ks, j0, T, hd);
  att_load_tile(Vs, ldh, v + koff, ks, j0, T, hd);
  float *Sw = sm.S + warp * 16 * ATT_LDS;
  __nv_bfloat16 *Pw = sm.P + warp * 16 * ATT_LDP, *dSw = sm.dS + warp * 16 * ATT_LDP;
  att_frag_c dka[MAX_CB], dva[MAX_CB];
#pragma unroll
  for (int cb = 0; cb < MAX_CB; cb++) {
    nvcuda::wmma::fill_fragment(dka[cb], 0.0f);
    nvcuda::wmma::fill_fragment(dva[cb], 0.0f);
  }

  for (int r = 0; r < G; r++) {
    const int h = g * G + r;
    const size_t qoff = (size_t)b * T * qs + (size_t)h * hd, soff = ((size_t)b * H + h) * T;
    for (int qt = kt; qt < nt; qt++) {
      const int i0 = qt * ATT_TILE;
      // Packed: once a query tile's documents all start after this tile's
      // last key, so do every later one's (the diagonal is never skipped).
      if (att_doc_start(pb, i0, T) >= j0 + ATT_TILE) break;
      __syncthreads(); // the previous query tile is no longer read
      att_load_tile(Qs, ldh, q + qoff, qs, i0, T, hd);
      att_load_tile(dOs, ldh, dout + qoff, qs, i0, T, hd);
      if (threadIdx.x < ATT_TILE) {
        const int qi = i0 + threadIdx.x;
        sm.L[threadIdx.x] = qi < T ? lse[soff + qi] : 0.0f;
        sm.Dv[threadIdx.x] = qi < T ? D[soff + qi] : 0.0f;
        sm.St[threadIdx.x] = att_doc_start(pb, qi, T);
      }
      __syncthreads();
      // Sᵀ (keys × queries) gives Pᵀ, kept in registers while the buffer takes dPᵀ.
      att_mm_abt(Sw, Ks + warp * 16 * ldh, ldh, Qs, ldh, hd);
      __syncwarp();
      float p[16][2];
#pragma unroll
      for (int rr = 0; rr < 16; rr++) {
        const int kj = j0 + warp * 16 + rr;
#pragma unroll
        for (int u = 0; u < 2; u++) {
          const int c = lane + 32 * u, qi = i0 + c;
          p[rr][u] = kj > qi || kj < sm.St[c] || qi >= T ? 0.0f : eng_km_attn_p(Sw[rr * ATT_LDS + c], scale, sm.L[c]);
          Pw[rr * ATT_LDP + c] = to_nv_bf16(p[rr][u]);
        }
      }
      __syncwarp();
      att_mm_abt(Sw, Vs + warp * 16 * ldh, ldh, dOs, ldh, hd);
      __syncwarp();
#pragma unroll
      for (int rr = 0; rr < 16; rr++)
#pragma unroll
        for (int u = 0; u < 2; u++) {
          const int c = lane + 32 * u;
          dSw[rr * ATT_LDP + c] = to_nv_bf16(eng_km_attn_ds(p[rr][u], Sw[rr * ATT_LDS + c], sm.Dv[c], scale));
        }
      __syncwarp();
#pragma unroll
      for (int cb = 0; cb < MAX_CB; cb++)
        if (cb < ncb) {
          att_mm_pv(dva[cb], Pw, dOs, ldh, cb * 16);
          att_mm_pv(dka[cb], dSw, Qs, ldh, cb * 16);
        }
    }
  }

  eng_bf16 *dkb = dk + koff, *dvb = dv + koff;
#pragma unroll
  for (int cb = 0; cb < MAX_CB; cb++)
    if (cb < ncb) {
      __syncwarp();
      nvcuda::wmma::store_matrix_sync(Sw, dka[cb], ATT_LDS, nvcuda::wmma::mem_row_major);
      __syncwarp();
      att_store_block(dkb + cb * 16, ks, j0 + warp * 16, T, Sw);
      __syncwarp();
      nvcuda::wmma::store_matrix_sync(Sw, dva[cb], ATT_LDS, nvcuda::wmma::mem_row_major);
      __syncwarp();
      att_store_block(dvb + cb * 16, ks, j0 + warp * 16, T, Sw);
    }
}

int eng_cuda_attention_bwd(eng_bf16 *dq, eng_bf16 *dk, eng_bf16 *dv, const eng_bf16 *dout, const eng_bf16 *out,
                           const float *lse, const eng_bf16 *q, const eng_bf16 *k, const eng_bf16 *v,
                           const int32_t *pos, int B, int T, int H, int KV, int hd, void *scratch, eng_cuda_stream s,
                           eng_err *e) {
  int rc = att_check(B, T, H, KV, hd, e);
  if (rc) return rc;
  ENG_CUDA_REQUIRE(aligned16(dq) && aligned16(dk) && aligned16(dv) && aligned16(dout) && aligned16(q) &&
                       aligned16(k) && aligned16(v),
                   e, "attention backward: q, k, v and their gradients must be 16-byte aligned");
  if (B <= 0 || T <= 0) return 0;
  float *D = (float *)scratch;
  const size_t rows = (size_t)B * T * H;
  attn_bwd_D_k<<<(unsigned)((rows + 7) / 8), 256, 0, s>>>(D, dout, out, T, H, hd, rows);
  ENG_CUDA_LAUNCHED("attn_bwd_D_k", e);
  const size_t smem = bwd_smem_bytes(hd);
  const int nt = (T + ATT_TILE - 1) / ATT_TILE;
  const float scale = 1.0f / sqrtf((float)hd);
  ENG_CUDA_TRY(cudaFuncSetAttribute(attn_bwd_dq_k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem), e);
  attn_bwd_dq_k<<<dim3(nt, B * H), ATT_THREADS, smem, s>>>(dq, dout, lse, D, q, k, v, pos, T, H, KV, hd, scale);
  ENG_CUDA_LAUNCHED("attn_bwd_dq_k", e);
  ENG_CUDA_TRY(cudaFuncSetAttribute(attn_bwd_dkv_k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem), e);
  attn_bwd_dkv_k<<<dim3(nt, B * KV), ATT_THREADS, smem, s>>>(dk, dv, dout, lse, D, q, k, v, pos, T, H, KV, hd,
                                                             scale);
  ENG_CUDA_LAUNCHED("attn_bwd_dkv_k", e);
  return 0;
}
