// The dynamic quantization maps: their shape (0, ±1, sorted, symmetric, the
// decades), the encoder against a nearest-value scan everywhere it can go
// wrong (every midpoint and its neighbouring floats, every bucket edge, every
// code value, random and log-uniform values, 0, 1, above 1, subnormals), and
// the quantize-then-dequantize error of blocks within the bound the map's
// code spacing gives: half the gap between the two codes around the value,
// plus the few roundings of normalising and scaling back.
#include "optim/q8map.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static double urand(void) { // uniform in [0, 1)
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0;
}

static uint32_t bits_of(float f) {
  uint32_t b;
  memcpy(&b, &f, sizeof b);
  return b;
}

static float f32_of(uint32_t b) {
  float f;
  memcpy(&f, &b, sizeof f);
  return f;
}

// The code k of magnitude with value[k] <= x < value[k+1], then the nearer of
// the two (a tie takes k, the smaller magnitude). Distances exact in double.
static uint32_t nearest_mag(const eng_q8map *q, float x) {
  uint32_t k = 0;
  while (k + 1 < (uint32_t)q->nmag && q->value[k + 1] <= x) k++;
  if (k + 1 == (uint32_t)q->nmag) return k;
  double d0 = (double)x - q->value[k], d1 = (double)q->value[k + 1] - x;
  return d1 < d0 ? k + 1 : k;
}

// Half the gap between the codes around magnitude x (0 at or above 1).
static double half_gap(const eng_q8map *q, float x) {
  uint32_t k = 0;
  while (k + 1 < (uint32_t)q->nmag && q->value[k + 1] <= x) k++;
  if (k + 1 == (uint32_t)q->nmag) return 0.0;
  return ((double)q->value[k + 1] - q->value[k]) / 2.0;
}

static void check_encode(const eng_q8map *q, float x, const char *name) {
  uint32_t got = eng_q8_encode_mag(q, bits_of(x)), want = nearest_mag(q, x);
  CHECK(got == want, "%s map: magnitude %.9g (bits %08x) encodes to %u, the nearest code is %u", name,
        (double)x, bits_of(x), got, want);
  double err = fabs((double)x - q->value[got]);
  CHECK(x > 1.0f || err <= half_gap(q, x), "%s map: %.9g decodes to %.9g, error %.3g over half the gap %.3g",
        name, (double)x, (double)q->value[got], err, half_gap(q, x));
  if (q->is_signed) {
    uint8_t c = eng_q8_encode(q, -x);
    CHECK(c == (got | 0x80u), "%s map: -%.9g encodes to %u, not %u | 0x80", name, (double)x, c, got);
  }
}

static void map_shape(const eng_q8map *q, const char *name, int E) {
  CHECK(q->value[0] == 0.0f && q->value[q->nmag - 1] == 1.0f, "%s map: value[0] = 0 and the top code is 1", name);
  CHECK(q->value[1] == (float)pow(10.0, -E), "%s map: the smallest nonzero value is 1e-%d (%.9g)", name, E,
        (double)q->value[1]);
  for (int k = 0; k + 1 < q->nmag; k++)
    CHECK(q->value[k] < q->value[k + 1], "%s map: values must increase (%d: %.9g, %.9g)", name, k,
          (double)q->value[k], (double)q->value[k + 1]);
  // Codes per decade: half of the codes above the next decade down.
  for (int d = 0; d < E; d++) {
    int count = 0;
    for (int k = 1; k < q->nmag; k++) count += q->value[k] > (float)pow(10.0, -d - 1) && q->value[k] <= (float)pow(10.0, -d);
    CHECK(count == q->nmag / (2 << d), "%s map: decade %d holds %d codes, %d expected", name, d, count, q->nmag / (2 << d));
  }
  if (q->is_signed)
    for (int k = 0; k < 128; k++)
      CHECK(bits_of(q->value[k | 0x80]) == (bits_of(q->value[k]) | 0x80000000u), "signed map: code %d is -code %d", k | 0x80, k);
  // At most one midpoint per encoder bucket (what makes one compare enough).
  for (int k = 0; k + 2 < q->nmag; k++)
    CHECK(bits_of(q->mid[k]) >> ENG_Q8_SHIFT != bits_of(q->mid[k + 1]) >> ENG_Q8_SHIFT,
          "%s map: midpoints %d and %d share a bucket", name, k, k + 1);
  CHECK(q->lut_n <= ENG_Q8_LUT_MAX, "%s map: %d buckets fit the table", name, q->lut_n);
}

static void encoder_exhaustive_edges(const eng_q8map *q, const char *name) {
  for (int k = 0; k + 1 < q->nmag; k++) {
    double exact = ((double)q->value[k] + q->value[k + 1]) / 2.0;
    float m = (float)exact;
    check_encode(q, m, name);
    check_encode(q, nextafterf(m, 0.0f), name);
    check_encode(q, nextafterf(m, 2.0f), name);
    check_encode(q, q->mid[k], name);
    check_encode(q, q->value[k], name);
    check_encode(q, nextafterf(q->value[k + 1], 0.0f), name);
  }
  for (int32_t j = 0; j < q->lut_n; j++) {
    uint32_t lo = (uint32_t)(q->lut_base + j) << ENG_Q8_SHIFT;
    check_encode(q, f32_of(lo), name);
    check_encode(q, f32_of(lo | 0xffffu), name);
    check_encode(q, f32_of(lo | 0x8000u), name);
  }
  const float special[] = {0.0f, 1.0f, nextafterf(1.0f, 0.0f), nextafterf(1.0f, 2.0f), 1.5f,
                           FLT_MIN, 1e-40f, 1e-45f, 1e-30f, 1e-8f, 0.5f, 0.1f, 0.01f};
  for (size_t i = 0; i < sizeof special / sizeof *special; i++) check_encode(q, special[i], name);
  for (int i = 0; i < 200000; i++) {
    check_encode(q, (float)urand(), name);
    check_encode(q, (float)pow(10.0, -9.0 * urand()), name);
  }
}

// Quantize-then-dequantize of a block: each element within absmax · half gap
// of its normalised value, plus the roundings of x · (1/absmax) (two) and of
// value · absmax (one): 2^-21 of the magnitudes bounds them, or half the
// smallest subnormal where the decoded value is subnormal.
static void block_error(const eng_q8map *q, const char *name, const float *x, size_t n, const char *what) {
  uint8_t codes[4096];
  float y[4096];
  float a = eng_q8_quantize_block(q, codes, x, n);
  eng_q8_dequantize_block(q, y, codes, n, a);
  float amax = 0.0f;
  for (size_t i = 0; i < n; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
  CHECK(a == (amax >= FLT_MIN ? amax : 0.0f), "%s map, %s: absmax %.9g stored as %.9g", name, what, (double)amax, (double)a);
  for (size_t i = 0; i < n; i++) {
    if (a == 0.0f) {
      CHECK(y[i] == 0.0f, "%s map, %s: a block of subnormal magnitudes decodes to 0", name, what);
      continue;
    }
    float xn = fabsf(x[i]) * (1.0f / a);
    double err = fabs((double)x[i] - y[i]);
    double bound = a * half_gap(q, xn) + 0x1p-21 * (fabs(x[i]) + fabs(y[i])) + 0x1p-150;
    CHECK(err <= bound, "%s map, %s: element %zu = %.9g decodes to %.9g, error %.3g > bound %.3g", name, what, i,
          (double)x[i], (double)y[i], err, bound);
    if (x[i] == 0.0f) CHECK(y[i] == 0.0f, "%s map, %s: 0 decodes to %.9g", name, what, (double)y[i]);
    if (fabsf(x[i]) == a) CHECK(y[i] == x[i], "%s map, %s: ±absmax decodes to %.9g, not exactly", name, what, (double)y[i]);
  }
}

static void blocks(const eng_q8map *q, const char *name) {
  float x[4096];
  const size_t sizes[] = {256, 2048, 4096, 100, 1};
  for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
    size_t n = sizes[si];
    for (int rep = 0; rep < 20; rep++) {
      // Gaussian-like (sum of uniforms) and log-uniform over 9 decades.
      for (size_t i = 0; i < n; i++) {
        double gsum = urand() + urand() + urand() + urand() - 2.0;
        double v = rep % 2 ? gsum : pow(10.0, -9.0 * urand()) * (urand() < 0.5 ? -1 : 1);
        x[i] = (float)(q->is_signed ? v : fabs(v)) * (float)pow(10.0, -(rep % 7) * 6);
      }
      block_error(q, name, x, n, rep % 2 ? "gaussian" : "log-uniform");
    }
    // Adversarial: exact midpoints (times a power of two, so normalising is
    // exact), values next to them, 0, ±absmax, tiny values.
    for (size_t i = 0; i < n; i++) {
      int k = (int)(urand() * (q->nmag - 1));
      double mid = ((double)q->value[k] + q->value[k + 1]) / 2.0;
      float v = (float)mid;
      v = i % 3 == 0 ? v : i % 3 == 1 ? nextafterf(v, 0.0f) : nextafterf(v, 2.0f);
      if (i % 17 == 0) v = 0.0f;
      if (i % 19 == 0) v = 1e-30f;
      x[i] = (q->is_signed && i % 2 ? -v : v) * 0x1p-3f;
    }
    x[0] = 0x1p-3f;
    if (n > 1) x[n - 1] = q->is_signed ? -0x1p-3f : 0x1p-3f;
    block_error(q, name, x, n, "midpoints");
    // Subnormal maxima flush to an all-zero block.
    for (size_t i = 0; i < n; i++) x[i] = (float)(urand() * 1e-39) * (q->is_signed && i % 2 ? -1.0f : 1.0f);
    block_error(q, name, x, n, "subnormal");
  }
}

int main(void) {
  const eng_q8map *s = eng_q8_signed(), *u = eng_q8_unsigned();
  CHECK(s->is_signed && s->nmag == 128 && !u->is_signed && u->nmag == 256, "map kinds");
  CHECK(eng_q8_signed() == s, "the maps are built once");
  map_shape(s, "signed", 6);
  map_shape(u, "unsigned", 7);
  CHECK(s->value[255] == -1.0f && s->value[0x80] == 0.0f && signbit(s->value[0x80]), "signed map: -1 and -0");
  encoder_exhaustive_edges(s, "signed");
  encoder_exhaustive_edges(u, "unsigned");
  blocks(s, "signed");
  blocks(u, "unsigned");
  printf("q8map: ok\n");
  return 0;
}
