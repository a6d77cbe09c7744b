// CRC-32C (Castagnoli), the checksum every stored shard carries.
#ifndef ENG_COMMON_CRC32C_H
#define ENG_COMMON_CRC32C_H

#include <stddef.h>
#include <stdint.h>

// Continues a running checksum: crc = eng_crc32c(0, a, n); crc = eng_crc32c(crc, b, m).
uint32_t eng_crc32c(uint32_t crc, const void *data, size_t n);

#endif
