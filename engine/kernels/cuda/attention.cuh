// Shared pieces of the attention kernels: 64×64 tiles, four warps a block,
// each warp owning 16 rows of a tile; products on the tensor cores through
// WMMA (16×16×16 bf16 fragments, fp32 accumulators) with operands staged in
// shared memory. Scores, probabilities and accumulators pass through shared
// memory between the products, since a WMMA fragment's element layout is
// opaque and the softmax works row by row.
#ifndef ENG_KERNELS_CUDA_ATTENTION_CUH
#define ENG_KERNELS_CUDA_ATTENTION_CUH

#include <mma.h>

#include "kernels/cuda/util.cuh"

enum {
  ATT_TILE = 64,       // query rows and key rows of a tile
  ATT_THREADS = 128,   // four warps
  ATT_LDS = ATT_TILE + 4, // pitch of fp32 score rows (floats)
  ATT_LDP = ATT_TILE + 8, // pitch of bf16 probability rows (elements)
};

// Pitch of bf16 rows of head_dim values: +8 elements keeps rows 16-byte
// aligned and spreads them over the shared-memory banks.
static __host__ __device__ inline int att_ldh(int hd) { return hd + 8; }

typedef nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, __nv_bfloat16, nvcuda::wmma::row_major> att_frag_a;
// B read from the rows of a row-major tile as its transpose.
typedef nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, __nv_bfloat16, nvcuda::wmma::col_major> att_frag_bt;
typedef nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, __nv_bfloat16, nvcuda::wmma::row_major> att_frag_b;
typedef nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> att_frag_c;

// Rows row0 .. row0+63 of a [.., T, heads, hd] tensor (src points at row 0
// of the head; rows `stride` elements apart) into shared rows of pitch ld,
// 16 bytes at a time; rows at or past T are zero, so padded keys add nothing
// and padded queries stay finite.
static __device__ __forceinline__ void att_load_tile(__nv_bfloat16 *dst, int ld, const eng_bf16 *src, size_t stride,
                                                     int row0, int T, int hd) {
  const int chunks = hd / 8;
  for (int idx = threadIdx.x; idx < ATT_TILE * chunks; idx += ATT_THREADS) {
    int r = idx / chunks, c = idx - r * chunks;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (row0 + r < T) v = *reinterpret_cast<const uint4 *>(src + (size_t)(row0 + r) * stride + c * 8);
    *reinterpret_cast<uint4 *>(dst + r * ld + c * 8) = v;
  }
}

// One warp: S[16][64] (fp32, pitch ATT_LDS) = A·Bᵀ over hd, where A is 16
// rows and B 64 rows of bf16 head vectors (pitches lda, ldb).
static __device__ __forceinline__ void att_mm_abt(float *S, const __nv_bfloat16 *A, int lda, const __nv_bfloat16 *B,
                                                  int ldb, int hd) {
  for (int nb = 0; nb < ATT_TILE / 16; nb++) {
    att_frag_c acc;
    nvcuda::wmma::fill_fragment(acc, 0.0f);
    for (int kk = 0; kk < hd; kk += 16) {
      att_frag_a fa;
      att_frag_bt fb;
      nvcuda::wmma::load_matrix_sync(fa, A + kk, lda);
      nvcuda::wmma::load_matrix_sync(fb, B + nb * 16 * ldb + kk, ldb);
      nvcuda::wmma::mma_sync(acc, fa, fb, acc);
    }
    nvcuda::wmma::store_matrix_sync(S + nb * 16, acc, ATT_LDS, nvcuda::wmma::mem_row_major);
  }
}

// One warp: acc += P[16][64] (bf16, pitch ATT_LDP) · V[64][16 columns from
// col] (bf16, pitch ldv).
static __device__ __forceinline__ void att_mm_pv(att_frag_c &acc, const __nv_bfloat16 *P, const __nv_bfloat16 *V,
                                                 int ldv, int col) {
#pragma unroll
  for (int kk = 0; kk < ATT_TILE; kk += 16) {
    att_frag_a fa;
    att_frag_b fb;
    nvcuda::wmma::load_matrix_sync(fa, P + kk, ATT_LDP);
    nvcuda::wmma::load_matrix_sync(fb, V + kk * ldv + col, ldv);
    nvcuda::wmma::mma_sync(acc, fa, fb, acc);
  }
}

// First key of the document of query row qi (pos: the sequence's position
// ids, kernels.h; NULL: 0), and 0 for a row past T. Along a sequence the
// starts never decrease, so a tile's first row has its earliest.
static __device__ __forceinline__ int att_doc_start(const int32_t *pos, int qi, int T) {
  return pos && qi < T ? qi - pos[qi] : 0;
}

// Host-side checks shared by the forward and the backward.
static inline int att_check(int B, int T, int H, int KV, int hd, eng_err *e) {
  ENG_CUDA_REQUIRE(hd > 0 && hd % 16 == 0 && hd <= ENG_CUDA_MAX_HD, e,
                   "attention: head_dim %d is not a multiple of 16 up to %d", hd, ENG_CUDA_MAX_HD);
  ENG_CUDA_REQUIRE(KV > 0 && H % KV == 0, e, "attention: %d heads are not a multiple of %d kv heads", H, KV);
  ENG_CUDA_REQUIRE((size_t)B * H <= 65535, e, "attention: %d sequences of %d heads exceed the grid", B, H);
  (void)T;
  return 0;
}

#endif
