#include "common/bf16.h"

#include "common/bf16_simd.h"

// Work split of the array conversions: fixed chunks of a few hundred KiB, and
// no threads for arrays too small to repay a parallel region.
enum { CHUNK = 16384, PAR_MIN = 65536 };

typedef void (*narrow_fn)(uint16_t *dst, const float *src, size_t n);
typedef void (*widen_fn)(float *dst, const uint16_t *src, size_t n);

static void narrow_scalar(uint16_t *dst, const float *src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = eng_bf16_from_f32(src[i]);
}

static void widen_scalar(float *dst, const uint16_t *src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = eng_bf16_to_f32(src[i]);
}

#if defined(__x86_64__)
#define AVX2 __attribute__((target("avx2")))
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))

AVX2 static void narrow_avx2(uint16_t *dst, const float *src, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i p = eng_bf16_narrow16_avx2(_mm256_loadu_si256((const __m256i *)(src + i)),
                                       _mm256_loadu_si256((const __m256i *)(src + i + 8)));
    _mm256_storeu_si256((__m256i *)(dst + i), p);
  }
  narrow_scalar(dst + i, src + i, n - i);
}

AVX2 static void widen_avx2(float *dst, const uint16_t *src, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + i)));
    _mm256_storeu_si256((__m256i *)(dst + i), _mm256_slli_epi32(h, 16));
  }
  widen_scalar(dst + i, src + i, n - i);
}

AVX512 static void narrow_avx512(uint16_t *dst, const float *src, size_t n) {
  for (size_t i = 0; i < n; i += 16) {
    __mmask16 k = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
    __m512i u = _mm512_maskz_loadu_epi32(k, src + i);
    _mm256_mask_storeu_epi16(dst + i, k, eng_bf16_narrow16_avx512(u));
  }
}

AVX512 static void widen_avx512(float *dst, const uint16_t *src, size_t n) {
  for (size_t i = 0; i < n; i += 16) {
    __mmask16 k = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
    __m512i h = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, src + i));
    _mm512_mask_storeu_epi32(dst + i, k, _mm512_slli_epi32(h, 16));
  }
}
#endif

int eng_bf16_from_f32_n(uint16_t *dst, const float *src, size_t n, eng_isa isa) {
  narrow_fn f = narrow_scalar;
  switch (eng_isa_resolve(isa)) {
  case ENG_ISA_SCALAR: break;
#if defined(__x86_64__)
  case ENG_ISA_AVX2: f = narrow_avx2; break;
  case ENG_ISA_AVX512: f = narrow_avx512; break;
#endif
  default: return ENG_ENOTSUP;
  }
  size_t nc = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
  for (size_t c = 0; c < nc; c++) {
    size_t i0 = c * CHUNK;
    f(dst + i0, src + i0, n - i0 < CHUNK ? n - i0 : CHUNK);
  }
  return ENG_OK;
}

// The widening path for isa, or NULL where it is not supported here.
static widen_fn widen_of(eng_isa isa) {
  switch (eng_isa_resolve(isa)) {
  case ENG_ISA_SCALAR: return widen_scalar;
#if defined(__x86_64__)
  case ENG_ISA_AVX2: return widen_avx2;
  case ENG_ISA_AVX512: return widen_avx512;
#endif
  default: return NULL;
  }
}

void eng_bf16_to_f32_here(float *dst, const uint16_t *src, size_t n) { widen_of(ENG_ISA_AUTO)(dst, src, n); }

int eng_bf16_to_f32_n(float *dst, const uint16_t *src, size_t n, eng_isa isa) {
  widen_fn f = widen_of(isa);
  if (!f) return ENG_ENOTSUP;
  size_t nc = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
  for (size_t c = 0; c < nc; c++) {
    size_t i0 = c * CHUNK;
    f(dst + i0, src + i0, n - i0 < CHUNK ? n - i0 : CHUNK);
  }
  return ENG_OK;
}

// One block: 8 interleaved partials combined in a fixed tree; each square is
// exact in double, so only the additions round (the shape of eng_k_sumsq_row).
static double sumsq_row(const uint16_t *x, size_t n) {
  double acc[8] = {0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; l++) {
      double v = eng_bf16_to_f32(x[i + l]);
      acc[l] += v * v;
    }
  for (int l = 0; i < n; i++, l++) {
    double v = eng_bf16_to_f32(x[i]);
    acc[l] += v * v;
  }
  return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

double eng_bf16_sumsq(const uint16_t *x, size_t n) {
  // Partials of a round of blocks live on the stack; rounds add in order.
  enum { BLOCK = 4096, ROUND = 256, SUM_PAR_MIN = 32768 };
  size_t nblk = (n + BLOCK - 1) / BLOCK;
  double total = 0.0;
  for (size_t r0 = 0; r0 < nblk; r0 += ROUND) {
    double part[ROUND];
    int m = (int)(nblk - r0 < ROUND ? nblk - r0 : ROUND);
#pragma omp parallel for schedule(static) if ((size_t)m * BLOCK >= SUM_PAR_MIN)
    for (int b = 0; b < m; b++) {
      size_t i0 = (r0 + (size_t)b) * BLOCK, len = n - i0 < BLOCK ? n - i0 : BLOCK;
      part[b] = sumsq_row(x + i0, len);
    }
    for (int b = 0; b < m; b++) total += part[b];
  }
  return total;
}
