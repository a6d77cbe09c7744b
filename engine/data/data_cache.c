#define _POSIX_C_SOURCE 200809L // O_CLOEXEC under -std=c17
// Tokenize once: the tokens of a text or chat file are kept in
// <cache_dir>/<key>.tok, key a digest of the file's bytes and of everything
// that shaped its tokens (the tokenizer.json, the chat template, the EOS,
// seq_len for the cut records). A later open of the same file with the same
// options (a resumed job, the next job on the data) reads them instead of
// tokenizing. The file is written atomically (model/atomic_file.h) and
// checked by a CRC-32C on reading; one that does not check is tokenized
// again and rewritten. Ids are checked against the vocabulary again.
//
// Layout, little-endian: "TRDTOK1\0", u64 key, u64 ntok, u64 nrec (0: a
// token stream), u64 ntrunc, u64 stored ids n; the stream's ntok ids, or the
// records' nrec + 1 u64 offsets and n ids and n labels; u32 CRC-32C of all
// the bytes before it.
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/crc32c.h"
#include "common/hash.h"
#include "data/data_impl.h"
#include "model/atomic_file.h"
#include "tok/chat.h"
#include "tok/tok.h"

static const char MAGIC[8] = "TRDTOK1";

typedef struct cache_head {
  char magic[8];
  uint64_t key, ntok, nrec, ntrunc, n;
} cache_head;

uint64_t eng_data_cache_key(const eng_data_opts *o, const char *buf, size_t len) {
  uint64_t h = eng_fnv1a64(ENG_FNV1A64_INIT, buf, len);
  uint64_t parts[5] = {eng_tok_hash(o->tok), (uint64_t)o->format, (uint64_t)(int64_t)o->eos, (uint64_t)o->seq_len,
                       o->chat ? (uint64_t)o->chat->kind : 0};
  h = eng_fnv1a64(h, parts, sizeof parts);
  if (o->chat) {
    const char *s[3] = {o->chat->default_system, o->chat->bos, o->chat->eos};
    for (int i = 0; i < 3; i++) h = eng_fnv1a64(h, s[i] ? s[i] : "", s[i] ? strlen(s[i]) + 1 : 1);
  }
  return h;
}

static void cache_path(char *out, size_t n, const char *dir, uint64_t key) {
  snprintf(out, n, "%s/%016llx.tok", dir, (unsigned long long)key);
}

static int read_exact(int fd, void *p, size_t n, uint32_t *crc) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, (char *)p + got, n - got);
    if (r <= 0) return -1;
    got += (size_t)r;
  }
  *crc = eng_crc32c(*crc, p, n);
  return 0;
}

int eng_data_cache_get(eng_data *d, const char *dir, uint64_t key, eng_err *e) {
  char path[4096];
  cache_path(path, sizeof path, dir, key);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  cache_head h;
  uint32_t crc = 0, want;
  int ok = read_exact(fd, &h, sizeof h, &crc) == 0 && !memcmp(h.magic, MAGIC, 8) && h.key == key &&
           h.n < (1ull << 40) && h.nrec < (1ull << 40);
  int32_t *ids = NULL, *labels = NULL;
  uint64_t *off = NULL;
  if (ok && !h.nrec) {
    ids = malloc((h.n ? h.n : 1) * sizeof *ids);
    ok = ids && read_exact(fd, ids, h.n * sizeof *ids, &crc) == 0;
  } else if (ok) {
    off = malloc((h.nrec + 1) * sizeof *off);
    ids = malloc((h.n ? h.n : 1) * sizeof *ids);
    labels = malloc((h.n ? h.n : 1) * sizeof *labels);
    ok = off && ids && labels && read_exact(fd, off, (h.nrec + 1) * sizeof *off, &crc) == 0 &&
         read_exact(fd, ids, h.n * sizeof *ids, &crc) == 0 && read_exact(fd, labels, h.n * sizeof *labels, &crc) == 0;
    for (uint64_t r = 0; ok && r < h.nrec; r++) ok = off[r] <= off[r + 1] && off[r + 1] <= h.n;
    ok = ok && off[0] == 0 && off[h.nrec] == h.n;
  }
  uint32_t stored = 0;
  want = crc;
  ok = ok && read_exact(fd, &stored, sizeof stored, &crc) == 0 && stored == want;
  close(fd);
  for (uint64_t i = 0; ok && i < h.n; i++)
    if (ids[i] < 0 || ids[i] >= d->vocab || (labels && labels[i] != ENG_DATA_IGNORE && (labels[i] < 0 || labels[i] >= d->vocab)))
      ok = 0;
  if (!ok) {
    free(ids);
    free(labels);
    free(off);
    return 0;
  }
  (void)e;
  d->ntok = h.ntok;
  d->ntrunc = h.ntrunc;
  d->from_cache = 1;
  if (!h.nrec) {
    d->text_ids = ids;
    return 1;
  }
  d->rec_ids = ids;
  d->rec_labels = labels;
  d->rec_off = off;
  d->nrec = h.nrec;
  return 1;
}

// Creates dir and the directories above it that are missing (private to
// the daemon's user: the tokens are its users' data).
static void mkdir_p(const char *dir) {
  char p[4096];
  snprintf(p, sizeof p, "%s", dir);
  for (char *s = p + 1; *s; s++)
    if (*s == '/') {
      *s = '\0';
      mkdir(p, 0700);
      *s = '/';
    }
  mkdir(p, 0700);
}

void eng_data_cache_put(const eng_data *d, const char *dir, uint64_t key) {
  char path[4096];
  cache_path(path, sizeof path, dir, key);
  mkdir_p(dir);
  cache_head h = {.key = key, .ntok = d->ntok, .nrec = d->rec_ids ? d->nrec : 0, .ntrunc = d->ntrunc};
  memcpy(h.magic, MAGIC, 8);
  h.n = d->rec_ids ? d->rec_off[d->nrec] : d->ntok;
  eng_afile f;
  eng_err e = {0};
  if (eng_afile_open(&f, path, &e)) return;
  uint32_t crc = eng_crc32c(0, &h, sizeof h);
  int rc = eng_afile_write(&f, &h, sizeof h, &e);
  if (!d->rec_ids) {
    if (!rc) rc = eng_afile_write(&f, d->text_ids, h.n * sizeof *d->text_ids, &e);
    crc = eng_crc32c(crc, d->text_ids, h.n * sizeof *d->text_ids);
  } else {
    size_t no = (d->nrec + 1) * sizeof *d->rec_off, ni = h.n * sizeof *d->rec_ids;
    if (!rc) rc = eng_afile_write(&f, d->rec_off, no, &e);
    if (!rc) rc = eng_afile_write(&f, d->rec_ids, ni, &e);
    if (!rc) rc = eng_afile_write(&f, d->rec_labels, ni, &e);
    crc = eng_crc32c(eng_crc32c(eng_crc32c(crc, d->rec_off, no), d->rec_ids, ni), d->rec_labels, ni);
  }
  if (!rc) rc = eng_afile_write(&f, &crc, sizeof crc, &e);
  if (rc) eng_afile_abort(&f);
  else eng_afile_commit(&f, &e);
}
