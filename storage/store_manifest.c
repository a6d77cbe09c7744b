// A checkpoint's manifest: the record whose presence makes it exist. Bytes:
//   "TCKM", version u32, step u64, attempt u64, count u32,
//   count x (name length u8, name, size u64, crc32c u32),
//   crc32c u32 of everything before it.
// Integers little-endian. The trailing checksum catches a damaged manifest
// before any shard is trusted.
#include <inttypes.h>
#include <stdlib.h>

#include "common/crc32c.h"
#include "store_impl.h"

enum { MANIFEST_VERSION = 1 };

static void put_le(char **p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++) *(*p)++ = (char)(v >> (8 * i));
}

static uint64_t get_le(const char **p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; i++) v |= (uint64_t)(unsigned char)(*p)[i] << (8 * i);
  *p += bytes;
  return v;
}

int store_manifest_encode(const store_manifest *m, char **out, size_t *n, eng_err *e) {
  size_t cap = 4 + 4 + 8 + 8 + 4 + (size_t)m->count * (1 + STORE_NAME_MAX + 8 + 4) + 4;
  char *buf = malloc(cap), *p = buf;
  if (!buf) return eng_err_set(e, ENG_ENOMEM, "cannot allocate a manifest of %d shards", m->count);
  memcpy(p, "TCKM", 4);
  p += 4;
  put_le(&p, MANIFEST_VERSION, 4);
  put_le(&p, (uint64_t)m->step, 8);
  put_le(&p, m->attempt, 8);
  put_le(&p, (uint64_t)m->count, 4);
  for (int i = 0; i < m->count; i++) {
    size_t len = strlen(m->shards[i].name);
    put_le(&p, len, 1);
    memcpy(p, m->shards[i].name, len);
    p += len;
    put_le(&p, m->shards[i].size, 8);
    put_le(&p, m->shards[i].crc, 4);
  }
  put_le(&p, eng_crc32c(0, buf, (size_t)(p - buf)), 4);
  *out = buf;
  *n = (size_t)(p - buf);
  return 0;
}

static int decode(const char *buf, size_t n, store_manifest *m) {
  const char *p = buf, *end = buf + n;
  if (n < 32 || memcmp(p, "TCKM", 4)) return -1;
  p += 4;
  const char *tail = end - 4;
  if (get_le(&tail, 4) != eng_crc32c(0, buf, n - 4)) return -1;
  end -= 4;
  if (get_le(&p, 4) != MANIFEST_VERSION) return -1;
  m->step = (int64_t)get_le(&p, 8);
  m->attempt = get_le(&p, 8);
  uint64_t count = get_le(&p, 4);
  if (count > n) return -1;
  m->shards = calloc(count ? count : 1, sizeof *m->shards);
  if (!m->shards) return -1;
  m->count = (int)count;
  for (int i = 0; i < m->count; i++) {
    if (end - p < 1) return -1;
    size_t len = get_le(&p, 1);
    if (len == 0 || len > STORE_NAME_MAX || (size_t)(end - p) < len + 12) return -1;
    memcpy(m->shards[i].name, p, len);
    p += len;
    m->shards[i].size = get_le(&p, 8);
    m->shards[i].crc = (uint32_t)get_le(&p, 4);
  }
  return p == end ? 0 : -1;
}

int store_manifest_read(store *s, const char *job, int64_t step, store_manifest *m, eng_err *e) {
  *m = (store_manifest){0};
  skey k = key_ckpt('M', job, step);
  char *err = NULL;
  size_t n = 0;
  char *v = rocksdb_get_cf(s->db, s->rd_nocheck, s->cf[CF_CKPT], k.b, k.n, &n, &err);
  if (err)
    return store_rocks_err(s, err, 0, e, "checkpoint of job \"%s\" at step %" PRId64 ": manifest", job, step);
  if (!v) return 1;
  int bad = decode(v, n, m);
  rocksdb_free(v);
  if (bad || m->step != step) {
    store_manifest_free(m);
    return eng_err_set(e, STORE_ECORRUPT, "checkpoint of job \"%s\" at step %" PRId64 ": the manifest is "
                       "damaged (%zu bytes)", job, step, n);
  }
  return 0;
}

const store_shard *store_manifest_find(const store_manifest *m, const char *name) {
  for (int i = 0; i < m->count; i++)
    if (!strcmp(m->shards[i].name, name)) return &m->shards[i];
  return NULL;
}

void store_manifest_free(store_manifest *m) {
  free(m->shards);
  m->shards = NULL;
  m->count = 0;
}
