// Damage on disk where a checkpoint's bytes live is caught on load, with an
// error naming the job, the step and the shard, and the other shards still
// load: bytes flipped inside a layer shard's value in its blob file, inside
// the small "meta" shard's value in an SST file, and a blob file cut short.
// The engine's eng_load through the store refuses the damaged checkpoint
// with the same error.
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "storage/store.h"
#include "tiny.h"
#include "unit/tmpdir.h"

static eng_err e;
static const char JOB[] = "corrupt";

// Reads a whole file into a malloc'd buffer.
static char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  CHECK(f, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc(*n ? *n : 1);
  CHECK(b && fread(b, 1, *n, f) == *n, "cannot read %s", path);
  fclose(f);
  return b;
}

// Finds the one file of dir holding needle; returns its path and offset.
static const char *locate(const char *dir, const void *needle, size_t len, long *off) {
  static char found[1024];
  int hits = 0;
  DIR *d = opendir(dir);
  CHECK(d, "cannot list %s", dir);
  struct dirent *de;
  while ((de = readdir(d))) {
    if (de->d_name[0] == '.' || strstr(de->d_name, "LOG")) continue;
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
    size_t n;
    char *b = slurp(p, &n);
    for (size_t i = 0; i + len <= n; i++)
      if (!memcmp(b + i, needle, len)) {
        snprintf(found, sizeof found, "%s", p);
        *off = (long)i;
        hits++;
      }
    free(b);
  }
  closedir(d);
  CHECK(hits == 1, "the bytes should live in exactly one place in %s (found %d)", dir, hits);
  return found;
}

static void flip(const char *path, long off, size_t n) {
  int fd = open(path, O_RDWR);
  CHECK(fd >= 0, "cannot open %s", path);
  unsigned char b[64];
  CHECK(n <= sizeof b && pread(fd, b, n, off) == (ssize_t)n, "cannot read %s", path);
  for (size_t i = 0; i < n; i++) b[i] ^= 0xff;
  CHECK(pwrite(fd, b, n, off) == (ssize_t)n && fsync(fd) == 0, "cannot write %s", path);
  close(fd);
}

// The shard's bytes as the store has them now.
static char *shard(store *st, int64_t step, const char *name, size_t *n) {
  CHECK_OK(store_ckpt_size(st, JOB, step, name, n, &e), &e);
  char *b = malloc(*n);
  CHECK_OK(store_ckpt_load(st, JOB, step, name, b, *n, &e), &e);
  return b;
}

// Loading `name` fails with an error naming job, step and shard.
static void damaged(store *st, int64_t step, const char *name, const char *what) {
  size_t n;
  CHECK_OK(store_ckpt_size(st, JOB, step, name, &n, &e), &e);
  char *b = malloc(n), stepname[32], quoted[64];
  int rc = store_ckpt_load(st, JOB, step, name, b, n, &e);
  snprintf(stepname, sizeof stepname, "step %" PRId64, step);
  snprintf(quoted, sizeof quoted, "\"%s\"", name);
  CHECK(rc < 0, "%s: the damaged shard %s loaded", what, name);
  CHECK(strstr(e.msg, JOB) && strstr(e.msg, stepname) && strstr(e.msg, quoted), "%s: the error should name the "
        "job, the step and the shard: %s", what, e.msg);
  printf("%-34s %s: %s\n", what, store_err_name(rc), e.msg);
  free(b);
}

static void intact(store *st, int64_t step, const char *name) {
  size_t n;
  free(shard(st, step, name, &n));
}

int main(void) {
  tmp_make();
  const char *dir = tmp_path("db");
  store *st;
  CHECK_OK(store_open(&st, dir, NULL, &e), &e);
  eng_store es;
  CHECK_OK(store_engine_open(&es, st, JOB, 0, &e), &e);
  eng_spec s;
  tiny_spec(&s, 2);
  eng_run *r;
  CHECK_OK(eng_open(&s, &r, &e), &e);
  for (int i = 0; i < 3; i++) CHECK_OK(eng_step(r, NULL, &e), &e);
  CHECK_OK(eng_save(r, &es, &e), &e);
  int64_t step = eng_steps_done(r);
  size_t nw, nm;
  char *w = shard(st, step, "w.1", &nw), *meta = shard(st, step, "meta", &nm);
  es.close(es.ctx);
  store_close(st);

  // 16 bytes in the middle of layer 0's weights, in their blob file.
  long off;
  const char *blob = locate(dir, w + nw / 2, 64, &off);
  CHECK(strstr(blob, ".blob"), "a layer shard should live in a blob file, found in %s", blob);
  flip(blob, off + 8, 16);
  // 8 bytes of "meta" (128 bytes, below min_blob_size), in an SST file.
  const char *sst = locate(dir, meta, nm, &off);
  CHECK(strstr(sst, ".sst"), "meta should live in an SST file, found in %s", sst);
  flip(sst, off + 40, 8);

  CHECK_OK(store_open(&st, dir, NULL, &e), &e);
  damaged(st, step, "w.1", "bytes flipped in a blob file:");
  damaged(st, step, "meta", "bytes flipped in an SST file:");
  intact(st, step, "w.0");
  intact(st, step, "o.1.1");
  CHECK(store_ckpt_verify(st, JOB, step, NULL, &e) == STORE_ECORRUPT, "verify should fail: %s", e.msg);
  CHECK_OK(store_engine_open(&es, st, JOB, 0, &e), &e);
  eng_run *back;
  CHECK_OK(eng_open(&s, &back, &e), &e);
  CHECK(eng_load(back, &es, &e) == STORE_ECORRUPT && strstr(e.msg, JOB), "eng_load should refuse it: %s", e.msg);
  printf("%-34s %s\n", "eng_load of the damaged checkpoint:", e.msg);
  eng_close(back);
  es.close(es.ctx);
  store_close(st);

  // A blob file cut short: the shards that lived past the cut are named.
  size_t nv;
  CHECK_OK(store_open(&st, dir, NULL, &e), &e);
  char *v = shard(st, step, "o.3.1", &nv);
  store_close(st);
  blob = locate(dir, v + nv / 2, 64, &off);
  CHECK(truncate(blob, off) == 0, "truncate %s", blob);
  CHECK_OK(store_open(&st, dir, NULL, &e), &e);
  damaged(st, step, "o.3.1", "a blob file cut short:");
  store_close(st);

  eng_close(r);
  free(w);
  free(meta);
  free(v);
  tmp_cleanup();
  return 0;
}
