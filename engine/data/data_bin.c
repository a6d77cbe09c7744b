// llm.c-style token shards: read with pread a sample at a time, the header
// checked against the file size and every token against vocab once at open,
// and again as each sample is read. Not mapped: a mapped file truncated under
// a run kills the process with SIGBUS, where a short read fails the run.
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/data_impl.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "engine/data reads little-endian shards as they are: a big-endian host needs a byte-swapping reader"
#endif

enum { BIN_HEADER_BYTES = 1024, BIN_MAGIC = 20240520, CHECK_TOKENS = 1 << 16 };

static int32_t header_word(const unsigned char *head, int i) {
  int32_t v;
  memcpy(&v, head + 4 * i, sizeof v);
  return v;
}

int eng_data_bin_sniff(int fd) {
  unsigned char head[4];
  return pread(fd, head, sizeof head, 0) == (ssize_t)sizeof head && header_word(head, 0) == BIN_MAGIC;
}

static int read_at(const eng_data *d, void *buf, size_t n, uint64_t off, eng_err *e) {
  return eng_fs_pread(d->fd, d->path, d->size, buf, n, off, e);
}

int eng_data_bin_read(eng_data *d, uint64_t at, size_t n, int32_t *ids, eng_err *e) {
  int rc = read_at(d, d->raw, n * (size_t)d->tok_bytes, BIN_HEADER_BYTES + at * (uint64_t)d->tok_bytes, e);
  if (rc) return rc;
  for (size_t i = 0; i < n; i++) {
    uint32_t t;
    if (d->tok_bytes == 2) {
      uint16_t h;
      memcpy(&h, d->raw + 2 * i, sizeof h);
      t = h;
    } else {
      memcpy(&t, d->raw + 4 * i, sizeof t);
    }
    // The ids go straight into embedding lookups: one past vocab would read
    // past the table, so a file changed under the run is checked here too.
    if (t >= (uint32_t)d->vocab)
      return eng_err_set(e, ENG_EINVAL, "%s: token %llu (byte offset %llu) is %lu, not below vocab %d", d->path,
                         (unsigned long long)(at + i), (unsigned long long)(BIN_HEADER_BYTES + (at + i) * d->tok_bytes),
                         (unsigned long)t, d->vocab);
    ids[i] = (int32_t)t;
  }
  return ENG_OK;
}

// Every token once, in chunks, so that training never meets a bad one.
static int bin_check_tokens(eng_data *d, eng_err *e) {
  int32_t *ids = malloc(CHECK_TOKENS * sizeof *ids);
  unsigned char *raw = malloc(CHECK_TOKENS * 4);
  int rc = !ids || !raw ? eng_err_set(e, ENG_ENOMEM, "%s: cannot allocate a read buffer", d->path) : ENG_OK;
  unsigned char *sample = d->raw;
  d->raw = raw;
  for (uint64_t at = 0; !rc && at < d->ntok; at += CHECK_TOKENS) {
    size_t n = d->ntok - at < CHECK_TOKENS ? (size_t)(d->ntok - at) : CHECK_TOKENS;
    rc = eng_data_bin_read(d, at, n, ids, e);
  }
  d->raw = sample;
  free(raw);
  free(ids);
  return rc;
}

int eng_data_bin_load(eng_data *d, int fd, eng_err *e) {
  d->fd = fd; // closed by eng_data_close, also on any error below
  struct stat st;
  if (fstat(fd, &st) != 0) return eng_err_set(e, ENG_EIO, "%s: cannot stat: %s", d->path, strerror(errno));
  d->size = (uint64_t)st.st_size;
  if (d->size == 0)
    return eng_err_set(e, ENG_EINVAL, "%s: empty file, expected a token shard with a %d-byte header", d->path,
                       BIN_HEADER_BYTES);
  if (d->size < BIN_HEADER_BYTES)
    return eng_err_set(e, ENG_EINVAL, "%s: %llu bytes, shorter than the %d-byte shard header (truncated file?)",
                       d->path, (unsigned long long)d->size, BIN_HEADER_BYTES);
  unsigned char head[12];
  int rc = read_at(d, head, sizeof head, 0, e);
  if (rc) return rc;
  int32_t magic = header_word(head, 0), version = header_word(head, 1);
  if (magic != BIN_MAGIC)
    return eng_err_set(e, ENG_EINVAL, "%s: header[0] (magic) is %d, expected %d: not a token shard", d->path,
                       magic, BIN_MAGIC);
  if (version != 1 && version != 2)
    return eng_err_set(e, ENG_EINVAL,
                       "%s: header[1] (version) is %d; known versions are 1 (uint16 tokens) and 2 (uint32 tokens)",
                       d->path, version);
  d->tok_bytes = version == 1 ? 2 : 4;
  // llm.c writes the count as int32; reading it unsigned allows shards up to 4G tokens.
  d->ntok = (uint32_t)header_word(head, 2);
  uint64_t body = d->size - BIN_HEADER_BYTES, need = d->ntok * (uint64_t)d->tok_bytes;
  if (body < need)
    return eng_err_set(e, ENG_EINVAL,
                       "%s: truncated: header[2] says %llu tokens (%llu bytes) but only %llu bytes follow the header",
                       d->path, (unsigned long long)d->ntok, (unsigned long long)need, (unsigned long long)body);
  if (body > need)
    return eng_err_set(e, ENG_EINVAL,
                       "%s: %llu bytes follow the header's %llu tokens (%llu bytes): header[2] or the version is wrong",
                       d->path, (unsigned long long)body, (unsigned long long)d->ntok, (unsigned long long)need);
  d->raw = malloc((size_t)d->seq_len * 4);
  if (!d->raw) return eng_err_set(e, ENG_ENOMEM, "%s: cannot allocate a sample's buffer", d->path);
  return bin_check_tokens(d, e);
}
