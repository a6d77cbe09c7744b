#include "kernels/cpu/gemm_amx.h"

#include "kernels/cpu/gemm.h" // eng_k_gemm_l2_budget, eng_k_gemm_block_put

#include <immintrin.h>
#include <omp.h>
#include <stdalign.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

// Asked of the kernel once: the tile data state is off until a process asks
// for it (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA).
enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };

#ifndef TRAIND_HAVE_AMX

// Built by a compiler without the tile intrinsics (engine/CMakeLists.txt):
// no route to offer.
int eng_k_amx_usable(void) { return 0; }

int eng_k_amx_sgemm(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb, int add,
                    float *C, int ldc, eng_k_rows_fn then, void *ctx) {
  (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)A, (void)lda, (void)B, (void)ldb, (void)add, (void)C,
      (void)ldc, (void)then, (void)ctx;
  return -1;
}

#else

int eng_k_amx_usable(void) {
  static int usable = -1; // written with the same value by any thread
  int u = __atomic_load_n(&usable, __ATOMIC_RELAXED);
  if (u < 0) {
    __builtin_cpu_init();
    u = __builtin_cpu_supports("amx-bf16") && __builtin_cpu_supports("avx512bf16") &&
        __builtin_cpu_supports("avx512bw") && syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
    __atomic_store_n(&usable, u, __ATOMIC_RELAXED);
  }
  return u;
}

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16,amx-tile,amx-bf16")

// Tiles are 16 rows of 32 bf16 (64 bytes). A block is 32 rows of C (two
// tiles of A) or 32 columns (two tiles of B); per k block of 32 it is
// packed as [split h, m, l][half][16 rows of 64 bytes]:
// - A's tile row i holds row i's 32 k in order;
// - B's tile row p holds, for 16 columns, the pair k = 2p, 2p+1 (the tile
//   unit's layout for its second operand).
enum { TROWS = 16, TK = 32, BLK = 32, TILE = TROWS * TK, SPLIT = 2 * TILE, KBLK = 3 * SPLIT };

typedef struct tilecfg {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} tilecfg;

// x = h + m + l, each the bf16 nearest the remainder: x - h and (x - h) - m
// are exact in fp32 (within a factor of 2 of what they round), and the last
// remainder has at most 8 significant bits, so l is exact too.
static inline void split3(__m512 x, __m256i out[3]) {
  for (int s = 0; s < 3; s++) {
    __m256i b = (__m256i)_mm512_cvtneps_pbh(x);
    out[s] = b;
    if (s < 2) x = _mm512_sub_ps(x, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16)));
  }
}

// Sixteen rows of 16 dwords transposed in registers.
static inline void transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; i++) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; i++) {
    r[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  // r[4i + c], 128-bit block b: column 4b + c, rows 4i .. 4i + 3.
  for (int c = 0; c < 4; c++) {
    __m512i v0 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x88), v1 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xdd);
    __m512i v2 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x88), v3 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xdd);
    t[c] = _mm512_shuffle_i32x4(v0, v2, 0x88);
    t[4 + c] = _mm512_shuffle_i32x4(v1, v3, 0x88);
    t[8 + c] = _mm512_shuffle_i32x4(v0, v2, 0xdd);
    t[12 + c] = _mm512_shuffle_i32x4(v1, v3, 0xdd);
  }
  for (int i = 0; i < 16; i++) r[i] = t[i];
}

static inline __mmask16 lanes(int n) { return n <= 0 ? 0 : n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1); }

static inline void tiles_store(uint16_t *t, __m512i v[3][16], int transpose) {
  for (int s = 0; s < 3; s++) {
    if (transpose) transpose16(v[s]);
    for (int r = 0; r < TROWS; r++) _mm512_store_si512(t + (size_t)s * SPLIT + r * TK, v[s][r]);
  }
}

// The three split tiles at t from nv vectors whose k run along memory:
// vector e is src + e·ld, k0 .. k0 + kn. Each gives a tile row of 16 pairs
// (A's layout), transposed into B's when asked.
static void tiles_from_k_rows(uint16_t *t, const float *src, size_t ld, int nv, int kn, int transpose) {
  __m512i v[3][16];
  __mmask16 m0 = lanes(kn), m1 = lanes(kn - 16);
  for (int e = 0; e < TROWS; e++) {
    if (e >= nv) {
      for (int s = 0; s < 3; s++) v[s][e] = _mm512_setzero_si512();
      continue;
    }
    __m256i lo[3], hi[3];
    split3(_mm512_maskz_loadu_ps(m0, src + (size_t)e * ld), lo);
    split3(_mm512_maskz_loadu_ps(m1, src + (size_t)e * ld + 16), hi);
    for (int s = 0; s < 3; s++) v[s][e] = _mm512_inserti64x4(_mm512_castsi256_si512(lo[s]), hi[s], 1);
  }
  tiles_store(t, v, transpose);
}

// The same from vectors that run across memory: k = k0 + q is the row
// src + q·ld, elements 0 .. ne. Pairs of k rows interleave into B's layout,
// transposed into A's when asked.
static void tiles_from_k_cols(uint16_t *t, const float *src, size_t ld, int ne, int kn, int transpose) {
  __m512i v[3][16];
  __mmask16 m = lanes(ne);
  for (int p = 0; p < TROWS; p++) {
    // The rows are a stride apart that the hardware prefetchers do not
    // follow: fetch the next k block's while this one is split (a prefetch
    // past the operand's end is dropped, never a fault). bench5m +4%.
    _mm_prefetch((const char *)(src + (size_t)(2 * p + TK) * ld), _MM_HINT_T0);
    _mm_prefetch((const char *)(src + (size_t)(2 * p + 1 + TK) * ld), _MM_HINT_T0);
    __m256i even[3], odd[3];
    __m512 x0 = 2 * p < kn ? _mm512_maskz_loadu_ps(m, src + (size_t)(2 * p) * ld) : _mm512_setzero_ps();
    __m512 x1 = 2 * p + 1 < kn ? _mm512_maskz_loadu_ps(m, src + (size_t)(2 * p + 1) * ld) : _mm512_setzero_ps();
    split3(x0, even);
    split3(x1, odd);
    for (int s = 0; s < 3; s++)
      v[s][p] = _mm512_or_si512(_mm512_cvtepu16_epi32(even[s]), _mm512_slli_epi32(_mm512_cvtepu16_epi32(odd[s]), 16));
  }
  tiles_store(t, v, transpose);
}

// One operand: element e at k is p[e·ld + k] when its k run along memory
// (A not transposed, B transposed), else p[k·ld + e]; n elements (rows of
// A or columns of B), K deep.
typedef struct operand {
  const float *p;
  size_t ld;
  int kcontig, is_b, n, K;
} operand;

// Block blk (elements 32·blk ..) of o, k blocks kb0 .. kb0 + nkb, to dst.
static void block_pack(uint16_t *dst, const operand *o, int blk, int kb0, int nkb) {
  int transpose = o->kcontig == o->is_b;
  for (int kb = kb0; kb < kb0 + nkb; kb++)
    for (int half = 0; half < 2; half++) {
      int e0 = blk * BLK + half * TROWS, ne = o->n - e0, k0 = kb * TK, kn = o->K - k0 < TK ? o->K - k0 : TK;
      uint16_t *t = dst + (size_t)(kb - kb0) * KBLK + half * TILE;
      if (o->kcontig)
        tiles_from_k_rows(t, o->p + (size_t)(ne > 0 ? e0 : 0) * o->ld + k0, o->ld, ne, kn, transpose);
      else
        tiles_from_k_cols(t, o->p + (size_t)k0 * o->ld + (ne > 0 ? e0 : 0), o->ld, ne, kn, transpose);
    }
}

// acc (32 × 32, rows ld floats apart) of a packed 32-row block of A against
// a packed 32-column block of B, from 0 or (resume) from acc. Tiles 0-3
// accumulate C (rows 0-15 | 16-31 × columns 0-15 | 16-31), 4-5 hold A's
// halves, 6-7 B's. The pairs run lh, mh, mm, hm, hh, hl, which reloads B's
// tiles 4 times per k block instead of 6.
static void block_product(float *acc, size_t ld, int resume, const uint16_t *a, const uint16_t *b, int nkb) {
  const size_t stride = ld * sizeof(float);
  float *acc1 = acc + TROWS, *acc2 = acc + TROWS * ld, *acc3 = acc + TROWS * ld + TROWS;
  if (resume) {
    _tile_loadd(0, acc, stride);
    _tile_loadd(1, acc1, stride);
    _tile_loadd(2, acc2, stride);
    _tile_loadd(3, acc3, stride);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
#define LOAD_A(s)                                                                                                 \
  do {                                                                                                            \
    _tile_loadd(4, ak + (s) * SPLIT, 64);                                                                         \
    _tile_loadd(5, ak + (s) * SPLIT + TILE, 64);                                                                  \
  } while (0)
#define LOAD_B(s)                                                                                                 \
  do {                                                                                                            \
    _tile_loadd(6, bk + (s) * SPLIT, 64);                                                                         \
    _tile_loadd(7, bk + (s) * SPLIT + TILE, 64);                                                                  \
  } while (0)
#define DP4()                                                                                                     \
  do {                                                                                                            \
    _tile_dpbf16ps(0, 4, 6);                                                                                      \
    _tile_dpbf16ps(1, 4, 7);                                                                                      \
    _tile_dpbf16ps(2, 5, 6);                                                                                      \
    _tile_dpbf16ps(3, 5, 7);                                                                                      \
  } while (0)
  for (int kb = 0; kb < nkb; kb++) {
    const uint16_t *ak = a + (size_t)kb * KBLK, *bk = b + (size_t)kb * KBLK;
    LOAD_A(2);
    LOAD_B(0);
    DP4(); // lh
    LOAD_A(1);
    DP4(); // mh
    LOAD_B(1);
    DP4(); // mm
    LOAD_A(0);
    DP4(); // hm
    LOAD_B(0);
    DP4(); // hh
    LOAD_B(2);
    DP4(); // hl
  }
#undef LOAD_A
#undef LOAD_B
#undef DP4
  _tile_stored(0, acc, stride);
  _tile_stored(1, acc1, stride);
  _tile_stored(2, acc2, stride);
  _tile_stored(3, acc3, stride);
}

static void tiles_config(void) {
  tilecfg cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = TROWS;
  _tile_loadconfig(&cfg);
}

// k blocks per pass (512 k). Between passes the accumulators are stored and
// reloaded, which changes no bit but drains the tile unit: passes of 128
// k, whose packed row block would stay in L1, ran 8% slower on the 5M bench
// model's shapes, and one pass for all k 15% slower (its K of 2048).
enum { PASS_KB = 16 };

int eng_k_amx_sgemm(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb, int add,
                    float *C, int ldc, eng_k_rows_fn then, void *ctx) {
  if (M <= 0 || N <= 0) return 0;
  const int nkb = (K + TK - 1) / TK, nrb = (M + BLK - 1) / BLK, ncb = (N + BLK - 1) / BLK;
  const int npass = nkb ? (nkb + PASS_KB - 1) / PASS_KB : 1;
  operand a = {A, (size_t)lda, !ta, 0, M, K}, b = {B, (size_t)ldb, tb, 1, N, K};
  // Per pass of 512 k, one operand (the "whole" one) is packed first, all
  // its blocks, by both threads; then each thread takes blocks of the other
  // (the "part" one) and multiplies each against the whole one's blocks, a
  // group at a time whose packed pass fits in L2. With one group the part
  // block is packed right before its products, while it is in cache;
  // with more, the thread packs its part blocks for the pass first.
  // B is the whole one (so rows finish together, for then) unless its pass
  // does not fit in L2 and A's does: the head's logits, 4096 or more wide.
  const size_t pass_blk = (size_t)PASS_KB * KBLK, pass_bytes = sizeof(uint16_t) * pass_blk;
  const size_t l2 = eng_k_gemm_l2_budget();
  const int rows_outer = pass_bytes / BLK * (size_t)N <= l2 || pass_bytes / BLK * (size_t)M > l2;
  const operand *whole = rows_outer ? &b : &a, *part = rows_outer ? &a : &b;
  const int nwhole = rows_outer ? ncb : nrb, npart = rows_outer ? nrb : ncb;
  const int group = l2 / pass_bytes > 1 ? (int)(l2 / pass_bytes) : 1;
  const int grouped = nwhole > group;
  // Below 16M multiply-adds a second thread gains nothing (256 × 352 × 128:
  // 324 GFLOP/s on one, 340 on two), and its barriers cost a time slice
  // each when the cores are shared with another busy process.
  const int nthr = (double)M * N * K < 16e6 ? 1 : omp_get_max_threads();
  uint16_t *wp = aligned_alloc(64, pass_bytes * (size_t)nwhole);
  uint16_t *pp = aligned_alloc(64, pass_bytes * (size_t)(grouped ? npart : nthr));
  float *accs = npass > 1 ? aligned_alloc(64, sizeof(float) * BLK * BLK * (size_t)nrb * (size_t)ncb) : NULL;
  if (!wp || !pp || (npass > 1 && !accs)) {
    free(wp), free(pp), free(accs);
    return -1;
  }
#pragma omp parallel num_threads(nthr)
  {
    tiles_config();
    alignas(64) float local[BLK * BLK];
    for (int pass = 0; pass < npass; pass++) {
      const int kb0 = pass * PASS_KB, nk = nkb - kb0 < PASS_KB ? nkb - kb0 : PASS_KB, last = pass == npass - 1;
      if (pass > 0) {
#pragma omp barrier
      }
#pragma omp for schedule(static)
      for (int w = 0; w < nwhole; w++) block_pack(wp + pass_blk * (size_t)w, whole, w, kb0, nk);
      // The same static schedule in every loop over q: a thread packs the
      // part blocks it multiplies and keeps their accumulators, so these
      // loops need no barrier between them.
      if (grouped) {
#pragma omp for schedule(static) nowait
        for (int q = 0; q < npart; q++) block_pack(pp + pass_blk * (size_t)q, part, q, kb0, nk);
      }
      for (int g0 = 0; g0 < nwhole; g0 += group) {
        const int g1 = g0 + group < nwhole ? g0 + group : nwhole;
#pragma omp for schedule(static) nowait
        for (int q = 0; q < npart; q++) {
          uint16_t *mine = pp + pass_blk * (size_t)(grouped ? q : omp_get_thread_num());
          if (!grouped) block_pack(mine, part, q, kb0, nk);
          for (int w = g0; w < g1; w++) {
            const int rb = rows_outer ? q : w, cb = rows_outer ? w : q, i0 = rb * BLK, j0 = cb * BLK;
            const int ni = M - i0 < BLK ? M - i0 : BLK, nj = N - j0 < BLK ? N - j0 : BLK;
            const uint16_t *wk = wp + pass_blk * (size_t)w;
            // A whole block of C = acc accumulates in C itself: no copy.
            const int direct = !add && ni == BLK && nj == BLK;
            float *acc = direct      ? C + (size_t)i0 * ldc + j0
                         : npass > 1 ? accs + (size_t)BLK * BLK * ((size_t)rb * ncb + cb)
                                     : local;
            block_product(acc, direct ? (size_t)ldc : BLK, pass > 0, rows_outer ? mine : wk, rows_outer ? wk : mine,
                          nk);
            if (last && !direct) eng_k_gemm_block_put(C + (size_t)i0 * ldc + j0, (size_t)ldc, acc, BLK, ni, nj, add);
          }
          if (last && g1 == nwhole && then && rows_outer) then(ctx, q * BLK, q * BLK + BLK < M ? q * BLK + BLK : M);
        }
      }
    }
    _tile_release();
  }
  free(wp), free(pp), free(accs);
  return then && !rows_outer;
}

#pragma GCC pop_options

#endif
