// The 8-bit AdamW block kernel on AVX2: 16 elements per iteration as two
// halves of 8 lanes, so the Σ u² lanes are the same 16 as the scalar and
// AVX-512 paths'. The operations of aw8_elem and eng_q8_encode, lane for lane.
#if defined(__x86_64__)
#include <immintrin.h>

#include "common/bf16_simd.h"
#include "optim/adamw8_impl.h"

#define AVX2 __attribute__((target("avx2")))

typedef struct {
  __m256 clip, decay, a1, a2, beta2, bc2, eps, step, inf, sm, sv;
  const float *mval, *vval; // the maps' values
  float *w, *wf;            // this block's weights and fp32 working copy (or NULL)
} consts8;

typedef struct {
  __m256 sq, umax, am, av;
} acc8;

AVX2 static inline float hmax8(__m256 x) {
  float t[8], r = 0.0f;
  memcpy(t, &x, sizeof t);
  for (int l = 0; l < 8; l++) r = aw8_max(t[l], r);
  return r;
}

AVX2 static inline __m256 abs8(__m256 x) {
  return _mm256_castsi256_ps(_mm256_and_si256(_mm256_castps_si256(x), _mm256_set1_epi32(0x7fffffff)));
}

// Gathers into a zeroed register: the destination is also an input of the
// instruction, and left to itself the compiler picks one holding the previous
// iteration's result, chaining every iteration's gathers to the one before.
AVX2 static inline __m256 gather_ps(const float *base, __m256i i) {
  return _mm256_mask_i32gather_ps(_mm256_setzero_ps(), base, i, _mm256_castsi256_ps(_mm256_set1_epi32(-1)), 4);
}

AVX2 static inline __m256i gather_epi32(const uint32_t *base, __m256i i) {
  return _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), (const int *)base, i, _mm256_set1_epi32(-1), 4);
}

// 8 elements from block offset i: g as floats, m and v codes as int32 lanes.
// Writes w, the working copy as fp32 (bf16 is written by the caller per 16),
// the new moments into mb/vb, and returns the new weights.
AVX2 static inline __m256 step8(const consts8 *k, size_t i, __m256 g, __m256i mc,
                                __m256i vc, float *mb, float *vb, acc8 *acc, uint32_t *nonfinite) {
  __m256 m = _mm256_mul_ps(gather_ps(k->mval, mc), k->sm);
  __m256 r = _mm256_mul_ps(gather_ps(k->vval, vc), k->sv); // the stored sqrt(v)
  __m256 v = _mm256_mul_ps(r, r);
  __m256 w = _mm256_loadu_ps(k->w + i);
  __m256 gi = _mm256_mul_ps(g, k->clip);
  __m256 p = _mm256_mul_ps(w, k->decay);
  __m256 mi = _mm256_add_ps(m, _mm256_mul_ps(_mm256_sub_ps(gi, m), k->a1));
  __m256 vi = _mm256_add_ps(_mm256_mul_ps(v, k->beta2), _mm256_mul_ps(k->a2, _mm256_mul_ps(gi, gi)));
  __m256 root = _mm256_sqrt_ps(vi);
  __m256 denom = _mm256_add_ps(_mm256_div_ps(root, k->bc2), k->eps);
  __m256 wn = _mm256_sub_ps(p, _mm256_mul_ps(k->step, _mm256_div_ps(mi, denom)));
  const int ok = _mm256_movemask_ps(_mm256_cmp_ps(vi, k->inf, _CMP_LT_OQ));
  if (__builtin_expect(ok != 0xff, 0)) { // a non-finite gradient: keep that element's old values
    const __m256 keep = _mm256_cmp_ps(vi, k->inf, _CMP_LT_OQ);
    *nonfinite += (uint32_t)(8 - __builtin_popcount((unsigned)ok));
    mi = _mm256_blendv_ps(m, mi, keep);
    root = _mm256_blendv_ps(r, root, keep);
    wn = _mm256_blendv_ps(w, wn, keep);
  }
  _mm256_storeu_ps(k->w + i, wn);
  if (k->wf) _mm256_storeu_ps(k->wf + i, wn);
  __m256 u = _mm256_sub_ps(wn, w);
  acc->sq = _mm256_add_ps(acc->sq, _mm256_mul_ps(u, u));
  acc->umax = _mm256_max_ps(abs8(u), acc->umax);
  acc->am = _mm256_max_ps(abs8(mi), acc->am);
  acc->av = _mm256_max_ps(root, acc->av);
  _mm256_storeu_ps(mb, mi);
  _mm256_storeu_ps(vb, root);
  return wn;
}

// Codes of 8 magnitudes in [0, 2) (bits with the sign clear):
// eng_q8_encode_mag. The bucket number cannot exceed the table there, and a
// saturating subtract clamps the buckets below it to the first.
AVX2 static inline __m256i encode8(const uint32_t *lut, __m256i base, __m256i b) {
  __m256i i = _mm256_subs_epu16(_mm256_srli_epi32(b, ENG_Q8_SHIFT), base);
  __m256i e = gather_epi32(lut, i);
  return _mm256_srli_epi32(_mm256_add_epi32(e, _mm256_and_si256(b, _mm256_set1_epi32(0xffff))), 16);
}

AVX2 static inline __m256i encode8_signed(const uint32_t *lut, __m256i base, __m256i b) {
  __m256i c = encode8(lut, base, _mm256_and_si256(b, _mm256_set1_epi32(0x7fffffff)));
  return _mm256_or_si256(c, _mm256_and_si256(_mm256_srli_epi32(b, 24), _mm256_set1_epi32(0x80)));
}

// 16 int32 codes (0..255) in two halves -> 16 bytes in order.
AVX2 static inline __m128i pack16(__m256i lo, __m256i hi) {
  __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xd8);
  return _mm_packus_epi16(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
}

AVX2 void eng_adamw8_blk_avx2(const aw8_args *a, size_t b, aw8_bstat *st) {
  const eng_adamw8_state *s = a->s;
  const size_t i0 = b * (size_t)s->block, n = aw8_block_len(s, b);
  const eng_adamw_coef *c = &a->c;
  // Locals and block-relative pointers, so that the stores below cannot make
  // the compiler reload them.
  const float *const gf = a->gf ? a->gf + (i0 - a->g0) : NULL;
  const uint16_t *const gb = a->gb ? a->gb + (i0 - a->g0) : NULL;
  uint16_t *const wb = a->wb ? a->wb + i0 : NULL;
  uint8_t *const mq = s->mq + i0, *const vq = s->vq + i0;
  float mb[ENG_ADAMW8_BLOCK_MAX] __attribute__((aligned(32)));
  float vb[ENG_ADAMW8_BLOCK_MAX] __attribute__((aligned(32)));
  const consts8 k = {
      _mm256_set1_ps(c->clip), _mm256_set1_ps(c->decay), _mm256_set1_ps(c->a1),
      _mm256_set1_ps(c->a2), _mm256_set1_ps(c->beta2), _mm256_set1_ps(c->bc2_sqrt),
      _mm256_set1_ps(c->eps), _mm256_set1_ps(c->step_size), _mm256_set1_ps(INFINITY),
      _mm256_set1_ps(s->ms[b]), _mm256_set1_ps(s->vs[b]),
      a->qm->value, a->qv->value, a->w + i0, a->wf ? a->wf + i0 : NULL,
  };
  acc8 lo = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  acc8 hi = lo;
  uint32_t nonfinite = 0;
  size_t j = 0;
  for (; j + 16 <= n; j += 16) {
    __m256 g0, g1;
    if (gf) {
      g0 = _mm256_loadu_ps(gf + j);
      g1 = _mm256_loadu_ps(gf + j + 8);
    } else {
      __m256i h = _mm256_loadu_si256((const __m256i *)(gb + j));
      g0 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(h)), 16));
      g1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(h, 1)), 16));
    }
    __m128i mc = _mm_loadu_si128((const __m128i *)(mq + j));
    __m128i vc = _mm_loadu_si128((const __m128i *)(vq + j));
    __m256 w0 = step8(&k, j, g0, _mm256_cvtepu8_epi32(mc), _mm256_cvtepu8_epi32(vc), mb + j, vb + j, &lo,
                      &nonfinite);
    __m256 w1 = step8(&k, j + 8, g1, _mm256_cvtepu8_epi32(_mm_srli_si128(mc, 8)),
                      _mm256_cvtepu8_epi32(_mm_srli_si128(vc, 8)), mb + j + 8, vb + j + 8, &hi, &nonfinite);
    if (wb)
      _mm256_storeu_si256((__m256i *)(wb + j),
                          eng_bf16_narrow16_avx2(_mm256_castps_si256(w0), _mm256_castps_si256(w1)));
  }
  aw8_acc acc = {.nonfinite = nonfinite};
  _mm256_storeu_ps(acc.sq, lo.sq);
  _mm256_storeu_ps(acc.sq + 8, hi.sq);
  acc.umax = aw8_max(hmax8(lo.umax), hmax8(hi.umax)); // max is exact in any order
  acc.am = aw8_max(hmax8(lo.am), hmax8(hi.am));
  acc.av = aw8_max(hmax8(lo.av), hmax8(hi.av));
  for (size_t t = j; t < n; t++) {
    mb[t] = k.mval[mq[t]] * s->ms[b];
    vb[t] = k.vval[vq[t]] * s->vs[b];
    aw8_elem(a, i0 + t, t, &mb[t], &vb[t], 1, &acc);
  }
  const float nm = eng_q8_block_absmax(acc.am), nv = eng_q8_block_absmax(acc.av);
  const float im = eng_q8_inv(nm), iv = eng_q8_inv(nv);
  const __m256 imv = _mm256_set1_ps(im), ivv = _mm256_set1_ps(iv);
  const __m256i mbase = _mm256_set1_epi32(a->qm->lut_base), vbase = _mm256_set1_epi32(a->qv->lut_base);
  const uint32_t *const mlut = a->qm->lut, *const vlut = a->qv->lut;
  size_t t = 0;
  for (; t + 16 <= n; t += 16) {
    __m256i m0 = encode8_signed(mlut, mbase, _mm256_castps_si256(_mm256_mul_ps(_mm256_load_ps(mb + t), imv)));
    __m256i m1 = encode8_signed(mlut, mbase, _mm256_castps_si256(_mm256_mul_ps(_mm256_load_ps(mb + t + 8), imv)));
    __m256i v0 = encode8(vlut, vbase, _mm256_castps_si256(_mm256_mul_ps(_mm256_load_ps(vb + t), ivv)));
    __m256i v1 = encode8(vlut, vbase, _mm256_castps_si256(_mm256_mul_ps(_mm256_load_ps(vb + t + 8), ivv)));
    _mm_storeu_si128((__m128i *)(mq + t), pack16(m0, m1));
    _mm_storeu_si128((__m128i *)(vq + t), pack16(v0, v1));
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
