// Block-wise dynamic ("tree") quantization of optimizer state to one byte per
// value (after Dettmers et al., arXiv 2110.02861; our own construction).
//
// A value x of a block is stored as a code c with x ≈ value[c] · absmax, one
// fp32 absmax per block. The code is a tiny float format: after the sign bit
// (signed map only), the number of leading zero bits E picks a decade, the
// first one bit ends the exponent, and the F remaining bits are a linear
// fraction f within the decade:
//   value = 10^-E · (0.1 + 0.9 · (f + 1) / 2^F)
// so each decade (10^-E-1, 10^-E] holds 2^F evenly spaced values: the top
// decade gets the most codes and small values keep a relative precision
// instead of a fixed absolute one. The all-zero magnitude is 0.
// - Unsigned map (second moment, stored as its root: optim/adamw8.h): 8
//   magnitude bits, E in 0..7, 256 values in [0, 1]: 0, then 1e-7 up to 1
//   (128 codes in (0.1, 1]).
// - Signed map (first moment): sign bit + 7 magnitude bits, E in 0..6, values
//   in [-1, 1]: 0, ±1e-6 up to ±1 (64 codes per sign in (0.1, 1]). Sign and
//   magnitude, so both signs have the same grid and the quantizer has no sign
//   bias; code 0x80 is -0, decoding to -0.0 (equal to 0).
// Codes of the unsigned map, and magnitudes of the signed one, are sorted:
// the code's integer order is its value's order.
//
// Quantizing picks the nearest value; a value exactly halfway between two
// codes takes the one of smaller magnitude (the lower magnitude code). The
// midpoints are exact in double; the search is one table lookup on the
// float's top bits plus one comparison (see eng_q8_encode), bit-identical to
// a search over the sorted values.
#ifndef ENG_OPTIM_Q8MAP_H
#define ENG_OPTIM_Q8MAP_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

// Encoder lookup: a magnitude x >= 0 (in units of the block absmax) is cut
// into buckets by its top bits, bits(x) >> ENG_Q8_SHIFT: the exponent and 7
// mantissa bits, so a bucket spans 1/128 of a binade. Buckets are narrower
// than the gap between two neighbouring midpoints anywhere in the map, so a
// bucket holds at most one midpoint. Its entry is the code of the bucket's
// lowest value in bits 16..23 and, in bits 0..15, 0xffff minus the low 16
// bits of the midpoint inside the bucket (0 when there is none): adding the
// low 16 bits of x carries into the code exactly when x lies above that
// midpoint, so code = (entry + (bits(x) & 0xffff)) >> 16. Buckets run from a
// binade below the smallest midpoint's to [1, 2), which absorbs a normalised
// value a rounding above 1.
#define ENG_Q8_SHIFT 16
#define ENG_Q8_LUT_MAX 3584

typedef struct eng_q8map {
  float value[256];            // code -> value in units of absmax (signed: full signed code)
  float mid[255];              // mid[k]: largest float <= midpoint of magnitudes k and k+1
  int nmag;                    // magnitude codes: 256 (unsigned) or 128 (signed)
  int is_signed;               // 1: bit 7 of a code is the sign
  int32_t lut_base;            // bucket number of lut[0]
  int32_t lut_n;               // buckets in lut
  uint32_t lut[ENG_Q8_LUT_MAX]; // code << 16 | (0xffff - low 16 bits of the bucket's midpoint)
} eng_q8map;

// The two maps, built once on first use (thread-safe) and never freed.
const eng_q8map *eng_q8_signed(void);
const eng_q8map *eng_q8_unsigned(void);

// Nearest magnitude code of the float whose bits are b: a magnitude in
// [0, 1] (sign bit clear; a NaN or a value above 1 gives the largest code).
// Inline: the scalar paths call it per element, the SIMD paths do the same
// steps on 16 lanes.
static inline uint32_t eng_q8_encode_mag(const eng_q8map *q, uint32_t b) {
  int32_t i = (int32_t)(b >> ENG_Q8_SHIFT) - q->lut_base;
  i = i < 0 ? 0 : i >= q->lut_n ? q->lut_n - 1 : i;
  return (q->lut[i] + (b & 0xffffu)) >> 16;
}

// Nearest code of x in units of absmax: x in [-1, 1] (signed map; the sign
// bit of x, -0 included, becomes bit 7) or [0, 1] (unsigned map).
static inline uint8_t eng_q8_encode(const eng_q8map *q, float x) {
  uint32_t b;
  memcpy(&b, &x, sizeof b);
  if (!q->is_signed) return (uint8_t)eng_q8_encode_mag(q, b);
  return (uint8_t)(eng_q8_encode_mag(q, b & 0x7fffffffu) | (b >> 31 << 7));
}

// The factor a block's values are multiplied by before encoding, given the
// block's absmax a: 1/a, correctly rounded, or 0 when a is 0 or subnormal.
// A block whose largest magnitude is subnormal is stored as all zeros with
// absmax 0 (eng_q8_block_absmax): 1/a would overflow there, and state that
// small (a first moment decaying on rows the data never touches) is better
// exactly zero than stuck at the map's smallest code forever.
static inline float eng_q8_inv(float a) { return a > 0.0f ? 1.0f / a : 0.0f; }

// The absmax stored for a block whose largest magnitude is a: a, or 0 when a
// is subnormal (see eng_q8_inv).
static inline float eng_q8_block_absmax(float a) { return a >= 0x1p-126f ? a : 0.0f; }

// Quantizes n values to codes with one absmax, returned (eng_q8_block_absmax
// of max |x|). x must be finite (and >= 0 for the unsigned map).
float eng_q8_quantize_block(const eng_q8map *q, uint8_t *codes, const float *x, size_t n);
// x[i] = value[codes[i]] * absmax.
void eng_q8_dequantize_block(const eng_q8map *q, float *x, const uint8_t *codes, size_t n, float absmax);

#endif
