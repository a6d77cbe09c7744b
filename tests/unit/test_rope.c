// RoPE's tables (model/rope.h) against transformers' own: for every case of
// tests/fixtures/rope/ref.json (tests/ref/gen_rope_fixtures.py: default,
// linear, llama3 with Llama 3.1's and 3.2's published parameters and small
// heads with a short original context, so that each of llama3's bands is
// met, and yarn with Qwen2.5's parameters, DeepSeek's mscales, a given
// attention factor, other betas and no truncation), eng_rope_table must give
// LlamaRotaryEmbedding's inv_freq bit for bit but where torch's vectorised
// pow (Sleef, within an ulp) and the C library's powf round theta^(2i/rd)
// to neighbouring floats (one ulp, on at most 1 in 50 frequencies), and its
// attention_scaling as the float transformers multiplies cos and sin by.
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "kernels/kernels.h"
#include "model/rope.h"

static float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

int main(void) {
  char path[1024];
  snprintf(path, sizeof path, "%s/tests/fixtures/rope/ref.json", TRAIND_SOURCE_DIR);
  json_error_t je;
  json_t *ref = json_load_file(path, 0, &je);
  CHECK(ref, "%s: %s", path, je.text);
  const char *name;
  json_t *cs;
  int cases = 0, types[ENG_ROPE_TYPES] = {0}, bands[3] = {0}; // llama3's: kept, blended, divided
  int freqs = 0, one_ulp = 0; // frequencies compared, and those an ulp off
  json_object_foreach(json_object_get(ref, "cases"), name, cs) {
    const json_t *rp = json_object_get(cs, "rope_parameters");
    eng_config c = {.head_dim = (int)json_integer_value(json_object_get(cs, "head_dim")),
                    .rope_theta = (float)json_number_value(json_object_get(rp, "rope_theta"))};
    c.rope.type = eng_rope_find(json_string_value(json_object_get(rp, "rope_type")));
    CHECK(c.rope.type >= 0, "%s: unknown rope_type", name);
    c.rope.factor = (float)json_number_value(json_object_get(rp, "factor"));
    c.rope.low_freq_factor = (float)json_number_value(json_object_get(rp, "low_freq_factor"));
    c.rope.high_freq_factor = (float)json_number_value(json_object_get(rp, "high_freq_factor"));
    c.rope.original_max_pos = (int)json_integer_value(json_object_get(rp, "original_max_position_embeddings"));
    c.rope.attention_factor = (float)json_number_value(json_object_get(rp, "attention_factor"));
    c.rope.beta_fast = (float)json_number_value(json_object_get(rp, "beta_fast"));
    c.rope.beta_slow = (float)json_number_value(json_object_get(rp, "beta_slow"));
    c.rope.mscale = (float)json_number_value(json_object_get(rp, "mscale"));
    c.rope.mscale_all_dim = (float)json_number_value(json_object_get(rp, "mscale_all_dim"));
    c.rope.no_truncate = json_is_false(json_object_get(rp, "truncate"));
    const json_t *bits = json_object_get(cs, "inv_freq_bits");
    const int h = c.head_dim / 2;
    CHECK((int)json_array_size(bits) == h, "%s: %zu frequencies for head_dim %d", name, json_array_size(bits),
          c.head_dim);
    eng_k_rope r;
    eng_rope_table(&c, &r);
    const float *got = r.inv_freq;
    const float scale = (float)json_real_value(json_object_get(cs, "attention_scaling"));
    CHECK(r.rd == c.head_dim && r.scale == scale, "%s: %d dims scaled by %.9g, transformers %d by %.9g", name, r.rd,
          r.scale, c.head_dim, scale);
    int differ = 0;
    for (int i = 0; i < h; i++) {
      const uint32_t want = (uint32_t)json_integer_value(json_array_get(bits, i));
      uint32_t have;
      memcpy(&have, &got[i], sizeof have);
      const int64_t ulps = (int64_t)have - (int64_t)want; // positive floats: bits order as values
      if (!ulps) continue;
      fprintf(stderr, "%s: inv_freq[%d] = %a, transformers %a (%lld ulp)\n", name, i, got[i], from_bits(want),
              (long long)ulps);
      CHECK(ulps == 1 || ulps == -1, "%s: inv_freq[%d] is %lld ulps off transformers'", name, i, (long long)ulps);
      differ++;
    }
    one_ulp += differ;
    eng_k_rope plain;
    eng_rope_table(&(eng_config){.rope_theta = c.rope_theta, .head_dim = c.head_dim}, &plain);
    for (int i = 0; c.rope.type == ENG_ROPE_LLAMA3 && i < h; i++)
      bands[got[i] == plain.inv_freq[i] ? 0 : got[i] == plain.inv_freq[i] / c.rope.factor ? 2 : 1]++;
    printf("%-24s %-8s %3d frequencies (%d an ulp off) and the scale %.9g as transformers'\n", name,
           eng_rope_name(c.rope.type), h, differ, r.scale);
    freqs += h;
    cases++;
    types[c.rope.type]++;
  }
  CHECK(cases >= 12 && types[ENG_ROPE_DEFAULT] && types[ENG_ROPE_LINEAR] && types[ENG_ROPE_LLAMA3] &&
            types[ENG_ROPE_YARN],
        "the fixture lacks a type (%d cases)", cases);
  printf("llama3's bands: %d frequencies kept, %d blended, %d divided by factor\n", bands[0], bands[1], bands[2]);
  printf("%d of %d frequencies bit-identical, %d an ulp off (torch's vectorised pow against powf)\n", freqs - one_ulp,
         freqs, one_ulp);
  CHECK(one_ulp * 50 <= freqs, "%d of %d frequencies an ulp off: more than pow's rounding explains", one_ulp, freqs);
  CHECK(bands[0] && bands[1] && bands[2], "the llama3 cases do not meet every band");
  json_decref(ref);
  printf("test_rope: ok\n");
  return 0;
}
