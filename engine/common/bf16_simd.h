// The SIMD forms of eng_bf16_from_f32 (common/bf16.h), shared by the
// vectorised kernels that narrow to bf16 (the array conversions, the
// optimizer's working copy). Each function carries its own target attribute,
// so including this header needs no -m flags; x86-64 only.
#ifndef ENG_COMMON_BF16_SIMD_H
#define ENG_COMMON_BF16_SIMD_H

#if defined(__x86_64__)
#include <immintrin.h>

// 8 lanes of fp32 bits -> bf16 bits in the low half of each lane.
__attribute__((target("avx2"))) static inline __m256i eng_bf16_narrow8_avx2(__m256i u) {
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
  __m256i mag = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
  __m256i nan = _mm256_cmpgt_epi32(mag, _mm256_set1_epi32(0x7f800000));
  __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(r, q, nan);
}

// 16 fp32 lanes (two halves of 8) -> 16 bf16 in order.
__attribute__((target("avx2"))) static inline __m256i eng_bf16_narrow16_avx2(__m256i lo, __m256i hi) {
  // packus interleaves the 128-bit lanes (lo0-3 hi0-3 lo4-7 hi4-7); the permute restores order.
  __m256i p = _mm256_packus_epi32(eng_bf16_narrow8_avx2(lo), eng_bf16_narrow8_avx2(hi));
  return _mm256_permute4x64_epi64(p, 0xd8);
}

// 16 lanes of fp32 bits -> 16 bf16 in order. The rounded value's high half
// is picked straight out of each lane by a word permute (no shift, no
// narrowing move); a NaN lane takes the high half of u | 0x00400000 instead.
__attribute__((target("avx512f,avx512bw,avx512dq"))) static inline __m256i eng_bf16_narrow16_avx512(__m512i u) {
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i t = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
  __mmask16 nan = _mm512_fpclass_ps_mask(_mm512_castsi512_ps(u), 0x81); // quiet or signalling NaN
  t = _mm512_mask_or_epi32(t, nan, u, _mm512_set1_epi32(0x00400000));
  const __m512i odd = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 31, 29, 27, 25, 23, 21,
                                       19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  return _mm512_castsi512_si256(_mm512_permutexvar_epi16(odd, t));
}
#endif

#endif
