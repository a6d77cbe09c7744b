// RoPE's frequencies (model/rope.h) against transformers' own: for every
// case of tests/fixtures/rope/ref.json (tests/ref/gen_rope_fixtures.py:
// default, linear and llama3, Llama 3.1's and 3.2's published parameters,
// and small heads with a short original context, so that each of llama3's
// bands is met), eng_rope_inv_freq must give LlamaRotaryEmbedding's
// inv_freq bit for bit, read through the same config.json keys.
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
    const json_t *bits = json_object_get(cs, "inv_freq_bits");
    const int h = c.head_dim / 2;
    CHECK((int)json_array_size(bits) == h, "%s: %zu frequencies for head_dim %d", name, json_array_size(bits),
          c.head_dim);
    CHECK(json_real_value(json_object_get(cs, "attention_scaling")) == 1.0, "%s: an attention scaling", name);
    float got[ENG_K_MAX_HD / 2];
    eng_rope_inv_freq(&c, c.head_dim, got);
    int differ = 0;
    for (int i = 0; i < h; i++) {
      const float want = from_bits((uint32_t)json_integer_value(json_array_get(bits, i)));
      if (memcmp(&got[i], &want, sizeof want)) {
        fprintf(stderr, "%s: inv_freq[%d] = %.9g (%a), transformers %.9g (%a)\n", name, i, got[i], got[i], want, want);
        differ++;
      }
    }
    CHECK(!differ, "%s: %d of %d frequencies differ from transformers'", name, differ, h);
    float plain[ENG_K_MAX_HD / 2];
    eng_rope_inv_freq(&(eng_config){.rope_theta = c.rope_theta}, c.head_dim, plain);
    for (int i = 0; c.rope.type == ENG_ROPE_LLAMA3 && i < h; i++)
      bands[got[i] == plain[i] ? 0 : got[i] == plain[i] / c.rope.factor ? 2 : 1]++;
    printf("%-24s %-8s %3d frequencies, bit-identical to transformers'\n", name, eng_rope_name(c.rope.type), h);
    cases++;
    types[c.rope.type]++;
  }
  CHECK(cases >= 8 && types[ENG_ROPE_DEFAULT] && types[ENG_ROPE_LINEAR] && types[ENG_ROPE_LLAMA3],
        "the fixture lacks a type (%d cases)", cases);
  printf("llama3's bands: %d frequencies kept, %d blended, %d divided by factor\n", bands[0], bands[1], bands[2]);
  CHECK(bands[0] && bands[1] && bands[2], "the llama3 cases do not meet every band");
  json_decref(ref);
  printf("test_rope: ok\n");
  return 0;
}
