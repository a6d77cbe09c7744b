// llm.c-style token shards: mmapped, the header checked against the file size,
// every token checked against vocab once at open.
#define _POSIX_C_SOURCE 200809L // O_CLOEXEC and mmap under -std=c17

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/data_impl.h"

// The shard is little-endian and its tokens are read in place.
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "engine/data reads little-endian shards in place: a big-endian host needs a byte-swapping reader"
#endif

enum { BIN_HEADER_BYTES = 1024, BIN_MAGIC = 20240520 };

static int32_t header_word(const unsigned char *map, int i) {
  int32_t v;
  memcpy(&v, map + 4 * i, sizeof v);
  return v;
}

int eng_data_bin_sniff(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  unsigned char head[4];
  ssize_t got = read(fd, head, sizeof head);
  close(fd);
  return got == (ssize_t)sizeof head && header_word(head, 0) == BIN_MAGIC;
}

// Maps the whole file into d->map (so eng_data_close unmaps it on any later error).
static int bin_map(eng_data *d, eng_err *e) {
  int fd = open(d->path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return eng_err_set(e, ENG_EIO, "%s: cannot open: %s", d->path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return eng_err_set(e, ENG_EIO, "%s: not a regular file", d->path);
  }
  size_t size = (size_t)st.st_size;
  if (size == 0) {
    close(fd);
    return eng_err_set(e, ENG_EINVAL, "%s: empty file, expected a token shard with a %d-byte header", d->path,
                       BIN_HEADER_BYTES);
  }
  if (size < BIN_HEADER_BYTES) {
    close(fd);
    return eng_err_set(e, ENG_EINVAL, "%s: %zu bytes, shorter than the %d-byte shard header (truncated file?)",
                       d->path, size, BIN_HEADER_BYTES);
  }
  void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
  int err = errno;
  close(fd); // the mapping keeps the file alive
  if (map == MAP_FAILED) return eng_err_set(e, ENG_EIO, "%s: cannot mmap %zu bytes: %s", d->path, size, strerror(err));
  d->map = map;
  d->map_len = size;
  return ENG_OK;
}

// Finds the first token >= vocab; tokens are unsigned, so this is the whole check.
static int bin_check_tokens(const eng_data *d, eng_err *e) {
  uint64_t vocab = (uint64_t)d->vocab;
  for (uint64_t i = 0; i < d->ntok; i++) {
    uint64_t t = d->tok_bytes == 2 ? ((const uint16_t *)d->tok)[i] : ((const uint32_t *)d->tok)[i];
    if (t >= vocab)
      return eng_err_set(e, ENG_EINVAL, "%s: token %llu (byte offset %llu) is %llu, not below vocab %d", d->path,
                         (unsigned long long)i, (unsigned long long)(BIN_HEADER_BYTES + i * d->tok_bytes),
                         (unsigned long long)t, d->vocab);
  }
  return ENG_OK;
}

int eng_data_bin_load(eng_data *d, eng_err *e) {
  int rc = bin_map(d, e);
  if (rc) return rc;
  const unsigned char *map = d->map;
  int32_t magic = header_word(map, 0), version = header_word(map, 1);
  if (magic != BIN_MAGIC)
    return eng_err_set(e, ENG_EINVAL, "%s: header[0] (magic) is %d, expected %d: not a token shard", d->path,
                       magic, BIN_MAGIC);
  if (version != 1 && version != 2)
    return eng_err_set(e, ENG_EINVAL,
                       "%s: header[1] (version) is %d; known versions are 1 (uint16 tokens) and 2 (uint32 tokens)",
                       d->path, version);
  d->tok_bytes = version == 1 ? 2 : 4;
  // llm.c writes the count as int32; reading it unsigned allows shards up to 4G tokens.
  d->ntok = (uint32_t)header_word(map, 2);
  uint64_t body = d->map_len - BIN_HEADER_BYTES, need = d->ntok * (uint64_t)d->tok_bytes;
  if (body < need)
    return eng_err_set(e, ENG_EINVAL,
                       "%s: truncated: header[2] says %llu tokens (%llu bytes) but only %llu bytes follow the header",
                       d->path, (unsigned long long)d->ntok, (unsigned long long)need, (unsigned long long)body);
  if (body > need)
    return eng_err_set(e, ENG_EINVAL,
                       "%s: %llu bytes follow the header's %llu tokens (%llu bytes): header[2] or the version is wrong",
                       d->path, (unsigned long long)body, (unsigned long long)d->ntok, (unsigned long long)need);
  d->tok = map + BIN_HEADER_BYTES;
  return bin_check_tokens(d, e);
}
