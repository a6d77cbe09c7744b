// The 8-bit AdamW block kernel on 16 lanes of AVX-512: the operations of
// aw8_elem and eng_q8_encode, lane for lane, so results equal the scalar
// path's bit for bit. Dequantizing is a gather from the map's 256 values,
// encoding a gather from its bucket table plus an add.
#if defined(__x86_64__)
#include <immintrin.h>

#include "common/bf16_simd.h"
#include "optim/adamw8_impl.h"

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))

// Gathers with a fresh all-ones mask and a zeroed destination. Plain
// _mm512_i32gather_* lets the compiler make the mask with kxnor on a mask
// register the loop also writes, and merge into a register holding the
// previous iteration's result: both are dependencies the hardware honours,
// which chain every iteration's gathers to the one before and halve the rate.
AVX512 static inline __mmask16 ones16(void) {
  unsigned x = 0xffff;
  __asm__("" : "+r"(x)); // opaque: a kmov from a register, not a kxnor
  return _cvtu32_mask16(x);
}

AVX512 static inline __m512 gather_ps(__m512i i, const float *base) {
  return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), ones16(), i, base, 4);
}

AVX512 static inline __m512i gather_epi32(__m512i i, const uint32_t *base) {
  return _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), ones16(), i, (const void *)base, 4);
}

// Codes of 16 magnitudes in [0, 2) (bits with the sign clear):
// eng_q8_encode_mag. The bucket number cannot exceed the table there, and a
// saturating subtract clamps the buckets below it to the first.
AVX512 static inline __m512i encode16(const uint32_t *lut, __m512i base, __m512i b) {
  __m512i i = _mm512_subs_epu16(_mm512_srli_epi32(b, ENG_Q8_SHIFT), base);
  __m512i e = gather_epi32(i, lut);
  return _mm512_srli_epi32(_mm512_add_epi32(e, _mm512_and_si512(b, _mm512_set1_epi32(0xffff))), 16);
}

AVX512 void eng_adamw8_blk_avx512(const aw8_args *a, size_t b, aw8_bstat *st) {
  const eng_adamw8_state *s = a->s;
  const size_t i0 = b * (size_t)s->block, n = aw8_block_len(s, b);
  const eng_adamw_coef *c = &a->c;
  // Locals, so that the stores below cannot make the compiler reload them.
  float *const w = a->w + i0, *const wf = a->wf ? a->wf + i0 : NULL;
  uint16_t *const wb = a->wb ? a->wb + i0 : NULL;
  const float *const gf = a->gf ? a->gf + (i0 - a->g0) : NULL;
  const uint16_t *const gb = a->gb ? a->gb + (i0 - a->g0) : NULL;
  uint8_t *const mq = s->mq + i0, *const vq = s->vq + i0;
  const float *const mval = a->qm->value, *const vval = a->qv->value;
  float mb[ENG_ADAMW8_BLOCK_MAX] __attribute__((aligned(64)));
  float vb[ENG_ADAMW8_BLOCK_MAX] __attribute__((aligned(64)));
  const __m512 sm = _mm512_set1_ps(s->ms[b]), sv = _mm512_set1_ps(s->vs[b]);
  const __m512 clip = _mm512_set1_ps(c->clip), decay = _mm512_set1_ps(c->decay);
  const __m512 a1 = _mm512_set1_ps(c->a1), a2 = _mm512_set1_ps(c->a2), beta2 = _mm512_set1_ps(c->beta2);
  const __m512 bc2 = _mm512_set1_ps(c->bc2_sqrt), eps = _mm512_set1_ps(c->eps);
  const __m512 step = _mm512_set1_ps(c->step_size), inf = _mm512_set1_ps(INFINITY);
  __m512 sq = _mm512_setzero_ps(), umax = sq, am = sq, av = sq;
  uint32_t nonfinite = 0;
  size_t j = 0;
  for (; j + 16 <= n; j += 16) {
    __m512 g = gf ? _mm512_loadu_ps(gf + j)
                  : _mm512_castsi512_ps(_mm512_slli_epi32(
                        _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(gb + j))), 16));
    __m512i mc = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(mq + j)));
    __m512i vc = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(vq + j)));
    __m512 m = _mm512_mul_ps(gather_ps(mc, mval), sm);
    __m512 r = _mm512_mul_ps(gather_ps(vc, vval), sv); // the stored sqrt(v)
    __m512 v = _mm512_mul_ps(r, r);
    __m512 wo = _mm512_loadu_ps(w + j);
    __m512 gi = _mm512_mul_ps(g, clip);
    __m512 p = _mm512_mul_ps(wo, decay);
    __m512 mi = _mm512_add_ps(m, _mm512_mul_ps(_mm512_sub_ps(gi, m), a1));
    __m512 vi = _mm512_add_ps(_mm512_mul_ps(v, beta2), _mm512_mul_ps(a2, _mm512_mul_ps(gi, gi)));
    __m512 root = _mm512_sqrt_ps(vi);
    __m512 denom = _mm512_add_ps(_mm512_div_ps(root, bc2), eps);
    __m512 wn = _mm512_sub_ps(p, _mm512_mul_ps(step, _mm512_div_ps(mi, denom)));
    __mmask16 ok = _mm512_cmp_ps_mask(vi, inf, _CMP_LT_OQ);
    if (__builtin_expect(!_kortestc_mask16_u8(ok, ok), 0)) { // a non-finite gradient: keep that element's old values
      nonfinite += (uint32_t)(16 - __builtin_popcount(ok));
      mi = _mm512_mask_mov_ps(m, ok, mi);
      root = _mm512_mask_mov_ps(r, ok, root);
      wn = _mm512_mask_mov_ps(wo, ok, wn);
    }
    _mm512_storeu_ps(w + j, wn);
    if (wf) _mm512_storeu_ps(wf + j, wn);
    if (wb) _mm256_storeu_si256((__m256i *)(wb + j), eng_bf16_narrow16_avx512(_mm512_castps_si512(wn)));
    __m512 u = _mm512_sub_ps(wn, wo);
    sq = _mm512_add_ps(sq, _mm512_mul_ps(u, u));
    umax = _mm512_max_ps(_mm512_abs_ps(u), umax);
    am = _mm512_max_ps(_mm512_abs_ps(mi), am);
    av = _mm512_max_ps(root, av);
    _mm512_store_ps(mb + j, mi);
    _mm512_store_ps(vb + j, root);
  }
  // The partial group at the end of the tensor: the scalar steps on the same lanes.
  aw8_acc acc = {.nonfinite = nonfinite};
  _mm512_storeu_ps(acc.sq, sq);
  acc.umax = _mm512_reduce_max_ps(umax); // max is exact in any order
  acc.am = _mm512_reduce_max_ps(am);
  acc.av = _mm512_reduce_max_ps(av);
  for (size_t t = j; t < n; t++) {
    mb[t] = mval[mq[t]] * s->ms[b];
    vb[t] = vval[vq[t]] * s->vs[b];
    aw8_elem(a, i0 + t, t, &mb[t], &vb[t], 1, &acc);
  }
  const float nm = eng_q8_block_absmax(acc.am), nv = eng_q8_block_absmax(acc.av);
  const float im = eng_q8_inv(nm), iv = eng_q8_inv(nv);
  const __m512 imv = _mm512_set1_ps(im), ivv = _mm512_set1_ps(iv);
  const __m512i mbase = _mm512_set1_epi32(a->qm->lut_base), vbase = _mm512_set1_epi32(a->qv->lut_base);
  const __m512i absmask = _mm512_set1_epi32(0x7fffffff);
  const uint32_t *const mlut = a->qm->lut, *const vlut = a->qv->lut;
  size_t t = 0;
  for (; t + 16 <= n; t += 16) {
    __m512i bm = _mm512_castps_si512(_mm512_mul_ps(_mm512_load_ps(mb + t), imv));
    __m512i cm = encode16(mlut, mbase, _mm512_and_si512(bm, absmask));
    // Sign into bit 7: (bm >> 24) & 0x80 | cm in one ternary-logic op.
    cm = _mm512_ternarylogic_epi32(cm, _mm512_srli_epi32(bm, 24), _mm512_set1_epi32(0x80), 0xf8);
    __m512i cv = encode16(vlut, vbase, _mm512_castps_si512(_mm512_mul_ps(_mm512_load_ps(vb + t), ivv)));
    _mm_storeu_si128((__m128i *)(mq + t), _mm512_cvtepi32_epi8(cm));
    _mm_storeu_si128((__m128i *)(vq + t), _mm512_cvtepi32_epi8(cv));
  }
  for (; t < n; t++) {
    mq[t] = eng_q8_encode(a->qm, mb[t] * im);
    vq[t] = eng_q8_encode(a->qv, vb[t] * iv);
  }
  s->ms[b] = nm;
  s->vs[b] = nv;
  aw8_finish(&acc, st);
}
#endif
