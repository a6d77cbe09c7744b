#include "model/rope.h"

#include <math.h>
#include <string.h>

#include "kernels/kmath_hd.h"

static const char *const names[ENG_ROPE_TYPES] = {"default", "linear", "llama3", "yarn"};

const char *eng_rope_name(int t) { return t >= 0 && t < ENG_ROPE_TYPES ? names[t] : "?"; }

int eng_rope_find(const char *s) {
  for (int t = 0; t < ENG_ROPE_TYPES; t++)
    if (!strcmp(s, names[t])) return t;
  return -1;
}

// Each step below in fp32 as torch takes it: a Python number meets a float
// tensor as a float, `number / tensor` is the tensor's reciprocal times the
// number, and what transformers computes on Python numbers is double here.

// Llama 3.1's: wavelengths under original_max_pos / high_freq_factor keep
// their frequency, those over original_max_pos / low_freq_factor take it
// divided by factor, and those between blend the two.
static float llama3(const eng_config *c, float f) {
  const float factor = c->rope.factor, lo = c->rope.low_freq_factor, hi = c->rope.high_freq_factor;
  const float old = (float)c->rope.original_max_pos;
  const float low_wavelen = (float)((double)c->rope.original_max_pos / lo);
  const float high_wavelen = (float)((double)c->rope.original_max_pos / hi);
  const float wavelen = (1.0f / f) * (float)(2.0 * M_PI);
  if (wavelen > low_wavelen) return f / factor;
  if (wavelen < high_wavelen) return f;
  const float smooth = ((1.0f / wavelen) * old - lo) / (float)((double)hi - (double)lo);
  return (1.0f - smooth) * f / factor + smooth * f;
}

// YaRN's (_compute_yarn_parameters): the dims that turn fewer than beta_slow
// times over the original context take the interpolated frequency, those
// turning more than beta_fast times keep theirs, a linear ramp between; and
// cos/sin scaled by 0.1·ln(factor) + 1 (or the ratio of the two mscales, or
// attention_factor as given).
static double yarn_mscale(double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * log(scale) + 1.0; }

static double yarn_dim(double rot, int rd, double base, double ctx) {
  return (rd * log(ctx / (rot * 2 * M_PI))) / (2 * log(base));
}

static void yarn(const eng_config *c, eng_k_rope *r) {
  const int h = r->rd / 2;
  const double base = c->rope_theta, ctx = c->rope.original_max_pos, factor = c->rope.factor;
  const double fast = c->rope.beta_fast ? c->rope.beta_fast : 32, slow = c->rope.beta_slow ? c->rope.beta_slow : 1;
  double lo = yarn_dim(fast, r->rd, base, ctx), hi = yarn_dim(slow, r->rd, base, ctx);
  if (!c->rope.no_truncate) lo = floor(lo), hi = ceil(hi);
  lo = lo > 0 ? lo : 0, hi = hi < r->rd - 1 ? hi : r->rd - 1;
  if (lo == hi) hi += 0.001; // transformers' guard against a zero-width ramp
  const float span = (float)(hi - lo), flo = (float)lo;
  for (int i = 0; i < h; i++) {
    const float pos_freq = powf(c->rope_theta, (float)(2 * i) / (float)r->rd);
    const float extra = 1.0f / pos_freq, inter = 1.0f / ((float)factor * pos_freq);
    float ramp = ((float)i - flo) / span;
    ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
    const float ef = 1.0f - ramp;
    r->inv_freq[i] = inter * (1.0f - ef) + extra * ef;
  }
  double af = c->rope.attention_factor;
  if (!af)
    af = c->rope.mscale && c->rope.mscale_all_dim
             ? yarn_mscale(factor, c->rope.mscale) / yarn_mscale(factor, c->rope.mscale_all_dim)
             : yarn_mscale(factor, 1);
  r->scale = (float)af;
}

void eng_rope_table(const eng_config *c, eng_k_rope *r) {
  r->rd = c->rope_dim ? c->rope_dim : c->head_dim;
  r->scale = 1.0f;
  if (c->rope.type == ENG_ROPE_YARN) {
    yarn(c, r);
    return;
  }
  for (int i = 0; i < r->rd / 2; i++) {
    const float f = eng_km_rope_inv_freq(i, r->rd, c->rope_theta); // plain RoPE's
    switch (c->rope.type) {
    case ENG_ROPE_LINEAR: r->inv_freq[i] = f / c->rope.factor; break;
    case ENG_ROPE_LLAMA3: r->inv_freq[i] = llama3(c, f); break;
    default: r->inv_freq[i] = f;
    }
  }
}
