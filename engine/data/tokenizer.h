// Byte-level tokenizer: token id = byte value (0..255), so any file is text
// and no vocabulary file is needed. Models that read it need vocab >= 256.
#ifndef ENG_DATA_TOKENIZER_H
#define ENG_DATA_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

// Number of ids the byte-level tokenizer produces.
#define ENG_TOK_BYTE_VOCAB 256

// Writes one id per byte of bytes[0..n) into ids[0..n).
void eng_tok_byte_encode(const uint8_t *bytes, size_t n, int32_t *ids);

// Writes the byte of each id into out[0..n) and a NUL at out[n] (out holds
// n + 1 bytes). An id outside 0..255 — a model with a larger vocab can
// sample one, and padding is not a byte — becomes '?'. Returns how many ids
// were replaced.
size_t eng_tok_byte_decode(const int32_t *ids, size_t n, char *out);

#endif
