#include "model/rope.h"

#include <math.h>
#include <string.h>

#include "kernels/kmath_hd.h"

static const char *const names[ENG_ROPE_TYPES] = {"default", "linear", "llama3"};

const char *eng_rope_name(int t) { return t >= 0 && t < ENG_ROPE_TYPES ? names[t] : "?"; }

int eng_rope_find(const char *s) {
  for (int t = 0; t < ENG_ROPE_TYPES; t++)
    if (!strcmp(s, names[t])) return t;
  return -1;
}

// Llama 3.1's: wavelengths under original_max_pos / high_freq_factor keep
// their frequency, those over original_max_pos / low_freq_factor take it
// divided by factor, and those between blend the two. Each step in fp32 as
// torch takes it: a Python number meets a float tensor as a float, and
// `number / tensor` is the tensor's reciprocal times the number.
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

void eng_rope_inv_freq(const eng_config *c, int rd, float *inv_freq) {
  for (int i = 0; i < rd / 2; i++) {
    const float f = eng_km_rope_inv_freq(i, rd, c->rope_theta); // plain RoPE's
    switch (c->rope.type) {
    case ENG_ROPE_LINEAR: inv_freq[i] = f / c->rope.factor; break;
    case ENG_ROPE_LLAMA3: inv_freq[i] = llama3(c, f); break;
    default: inv_freq[i] = f;
    }
  }
}
