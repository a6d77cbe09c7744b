// The avx2 route (kernels/cpu/gemm_fma.h): a register block of 6 rows × 16
// columns of chains in 12 ymm accumulators, one broadcast of A and two loads
// of the panel per step of k (15 of the 16 registers).
#include "kernels/cpu/gemm_fma.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma")))

enum { MR = 6, NR = 16 };

#define FMA_TARGET AVX2
#define VEC __m256
#define VW 8
#define VZERO() _mm256_setzero_ps()
#define VLOAD(p) _mm256_load_ps(p)
#define VLOADU(p) _mm256_loadu_ps(p)
#define VSTOREU(p, v) _mm256_storeu_ps(p, v)
#define VBCAST(p) _mm256_broadcast_ss(p)
#define VFMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define VTRANSPOSE(r) transpose8(r)
#define VADD(a, b) _mm256_add_ps(a, b)

// The 8 × 8 floats of r transposed in registers: r[c] becomes column c.
AVX2 static inline __attribute__((always_inline)) void transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; i++) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; i++) {
    u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xee);
    u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
  }
  for (int c = 0; c < 4; c++) {
    r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
    r[4 + c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
  }
}

#include "kernels/cpu/gemm_fma_block.h"

const eng_k_fma_isa eng_k_fma_avx2 = {"avx2", MR, NR, VW, rows, cols, tile_t};
#endif
