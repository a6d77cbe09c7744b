#include "data/tokenizer.h"

void eng_tok_byte_encode(const uint8_t *bytes, size_t n, int32_t *ids) {
  for (size_t i = 0; i < n; i++) ids[i] = bytes[i];
}

size_t eng_tok_byte_decode(const int32_t *ids, size_t n, char *out) {
  size_t replaced = 0;
  for (size_t i = 0; i < n; i++) {
    if (ids[i] >= 0 && ids[i] < ENG_TOK_BYTE_VOCAB) {
      out[i] = (char)(unsigned char)ids[i];
    } else {
      out[i] = '?';
      replaced++;
    }
  }
  out[n] = '\0';
  return replaced;
}
