#include "optim/q8map.h"

#include <math.h>
#include <pthread.h>

static eng_q8map maps[2]; // [0] signed, [1] unsigned
static pthread_once_t once = PTHREAD_ONCE_INIT;


static uint32_t bits_of(float f) {
  uint32_t b;
  memcpy(&b, &f, sizeof b);
  return b;
}

// Magnitudes, midpoints and the encoder table of a map with `bits` magnitude
// bits. Values are computed in double and rounded once to float; midpoints of
// two floats are exact in double (their exponents differ by less than 30).
static void build(eng_q8map *q, int bits, int is_signed) {
  static const double decade[8] = {1.0, 1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7};
  const int nmag = 1 << bits;
  float mag[256];
  mag[0] = 0.0f;
  for (int k = 1; k < nmag; k++) {
    int top = 31 - __builtin_clz((unsigned)k); // the indicator bit; F = top fraction bits below it
    int E = bits - 1 - top, f = k - (1 << top);
    mag[k] = (float)(decade[E] * (0.1 + 0.9 * (f + 1) / (double)(1 << top)));
  }
  q->nmag = nmag;
  q->is_signed = is_signed;
  for (int c = 0; c < 256; c++)
    q->value[c] = !is_signed ? mag[c] : c & 0x80 ? -mag[c & 0x7f] : mag[c];
  for (int k = 0; k + 1 < nmag; k++) {
    double m = ((double)mag[k] + (double)mag[k + 1]) / 2.0;
    float t = (float)m;
    q->mid[k] = (double)t > m ? nextafterf(t, 0.0f) : t;
  }
  // Buckets from the binade below the smallest midpoint's through [1, 2).
  int e;
  frexpf(q->mid[0], &e); // mid[0] = x · 2^e, x in [0.5, 1): binade e - 1
  int32_t first = (int32_t)(bits_of(ldexpf(1.0f, e - 2)) >> ENG_Q8_SHIFT);
  int32_t end = (int32_t)(bits_of(2.0f) >> ENG_Q8_SHIFT);
  q->lut_base = first;
  q->lut_n = end - first;
  int k = 0; // midpoints below the current bucket
  for (int32_t j = 0; j < q->lut_n; j++) {
    uint32_t lo = (uint32_t)(first + j) << ENG_Q8_SHIFT, hi = lo | 0xffffu;
    while (k < nmag - 1 && bits_of(q->mid[k]) < lo) k++;
    uint32_t carry = 0; // x carries into the code above this: 0xffff - low bits of the midpoint
    if (k < nmag - 1 && bits_of(q->mid[k]) <= hi) carry = 0xffffu - (bits_of(q->mid[k]) & 0xffffu);
    q->lut[j] = (uint32_t)k << 16 | carry;
  }
}

static void build_all(void) {
  build(&maps[0], 7, 1);
  build(&maps[1], 8, 0);
}

const eng_q8map *eng_q8_signed(void) {
  pthread_once(&once, build_all);
  return &maps[0];
}

const eng_q8map *eng_q8_unsigned(void) {
  pthread_once(&once, build_all);
  return &maps[1];
}

float eng_q8_quantize_block(const eng_q8map *q, uint8_t *codes, const float *x, size_t n) {
  float amax = 0.0f;
  for (size_t i = 0; i < n; i++) {
    float a = fabsf(x[i]);
    amax = a > amax ? a : amax;
  }
  amax = eng_q8_block_absmax(amax);
  const float inv = eng_q8_inv(amax);
  for (size_t i = 0; i < n; i++) codes[i] = eng_q8_encode(q, x[i] * inv);
  return amax;
}

void eng_q8_dequantize_block(const eng_q8map *q, float *x, const uint8_t *codes, size_t n, float absmax) {
  for (size_t i = 0; i < n; i++) x[i] = q->value[codes[i]] * absmax;
}
