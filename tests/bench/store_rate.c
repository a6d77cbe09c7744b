// The storage benchmark's driver (run by tests/bench/storage.sh).
//
//   bench_store_rate spill DIR [MIB] [REPS]
// Activation spill through the store (store_act_put, then store_act_flush:
// the values sit in synced blob files) against plain sequential write() of
// the same bytes to one file followed by fsync, then both read back cold
// (page cache dropped: fadvise DONTNEED on every file involved, plus
// /proc/sys/vm/drop_caches when writable) with store_act_get and read().
// MIB (default 2048) in values of 16 to 64 MiB, REPS (default 3)
// repetitions alternating the two sides; medians quoted. Last line:
// "storage: <ratio>x of raw write, <ratio>x of raw read".
//
//   bench_store_rate blob-sweep DIR
// The measurement behind the store's min_blob_size: checkpoints of 16 MiB in
// values of one size, keeping the last 2 (range delete + compaction, as
// store_ckpt_keep does), in a RocksDB family configured like `ckpt`, with
// every value in blob files versus every value inline in SST files. Prints
// the write rate, the bytes written per byte stored, and the cold read rate
// of the last checkpoint, per value size.
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <rocksdb/c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "storage/store.h"

#include "bench.h"

#define DIE(...)                                                                                   \
  do {                                                                                             \
    fprintf(stderr, "bench_store_rate: " __VA_ARGS__);                                             \
    fprintf(stderr, "\n");                                                                         \
    exit(1);                                                                                       \
  } while (0)

static void run(const char *cmd) {
  if (system(cmd) != 0) DIE("`%s` failed", cmd);
}

// Evicts every file under dir (one level of subdirectories) from the page
// cache; also drops the whole cache when this process may.
static int drop_cache(const char *dir) {
  sync();
  DIR *d = opendir(dir);
  if (!d) DIE("cannot list %s: %s", dir, strerror(errno));
  struct dirent *de;
  while ((de = readdir(d))) {
    if (de->d_name[0] == '.') continue;
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
    struct stat sb;
    if (stat(p, &sb)) continue;
    if (S_ISDIR(sb.st_mode)) {
      drop_cache(p);
      continue;
    }
    int fd = open(p, O_RDONLY);
    if (fd < 0) continue;
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
  }
  closedir(d);
  FILE *f = fopen("/proc/sys/vm/drop_caches", "w");
  if (!f) return 0;
  int ok = fputs("3\n", f) >= 0;
  return fclose(f) == 0 && ok;
}

// ---- spill ------------------------------------------------------------------------

enum { MIB = 1 << 20 };
static const int SIZES_MIB[] = {16, 32, 64, 48, 24};

static size_t value_size(int i) { return (size_t)SIZES_MIB[i % 5] * MIB; }

static void stamp(char *buf, int i) { memcpy(buf, &i, sizeof i); }

static void check_stamp(const char *buf, int i) {
  int got;
  memcpy(&got, buf, sizeof got);
  if (got != i) DIE("value %d read back as value %d", i, got);
}

static void store_side(const char *dir, int n, char *wbuf, char *rbuf, double *w_s, double *r_s, int *dropped) {
  char db[4096];
  snprintf(db, sizeof db, "%s/db", dir);
  store *st;
  eng_err e = {0};
  if (store_open(&st, db, NULL, &e)) DIE("%s", e.msg);
  double t0 = eng_now();
  for (int i = 0; i < n; i++) {
    stamp(wbuf, i);
    if (store_act_put(st, "bench", 0, i, 0, wbuf, value_size(i), &e)) DIE("%s", e.msg);
  }
  if (store_act_flush(st, &e)) DIE("%s", e.msg);
  *w_s = eng_now() - t0;
  *dropped = drop_cache(db);
  t0 = eng_now();
  for (int i = 0; i < n; i++) {
    if (store_act_get(st, "bench", 0, i, 0, rbuf, value_size(i), &e)) DIE("%s", e.msg);
    check_stamp(rbuf, i);
  }
  *r_s = eng_now() - t0;
  store_close(st);
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", db);
  run(cmd);
}

static void file_side(const char *dir, int n, char *wbuf, char *rbuf, double *w_s, double *r_s) {
  char path[4096];
  snprintf(path, sizeof path, "%s/raw.bin", dir);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) DIE("cannot create %s: %s", path, strerror(errno));
  double t0 = eng_now();
  for (int i = 0; i < n; i++) {
    stamp(wbuf, i);
    size_t len = value_size(i), done = 0;
    while (done < len) {
      ssize_t w = write(fd, wbuf + done, len - done);
      if (w < 0) DIE("writing %s: %s", path, strerror(errno));
      done += (size_t)w;
    }
  }
  if (fsync(fd)) DIE("fsync %s: %s", path, strerror(errno));
  *w_s = eng_now() - t0;
  close(fd);
  drop_cache(dir);
  fd = open(path, O_RDONLY);
  if (fd < 0) DIE("cannot open %s: %s", path, strerror(errno));
  t0 = eng_now();
  for (int i = 0; i < n; i++) {
    size_t len = value_size(i), done = 0;
    while (done < len) {
      ssize_t r = read(fd, rbuf + done, len - done);
      if (r <= 0) DIE("reading %s: %s", path, r ? strerror(errno) : "short file");
      done += (size_t)r;
    }
    check_stamp(rbuf, i);
  }
  *r_s = eng_now() - t0;
  close(fd);
  unlink(path);
}

static int spill(const char *dir, int total_mib, int reps) {
  if (reps < 1 || reps > 16 || total_mib < 16) DIE("MIB must be at least 16 and REPS 1 to 16");
  int n = 0;
  size_t total = 0;
  while (total < (size_t)total_mib * MIB) total += value_size(n++);
  char *wbuf = malloc(64 * (size_t)MIB), *rbuf = malloc(64 * (size_t)MIB);
  if (!wbuf || !rbuf) DIE("cannot allocate 128 MiB of buffers");
  uint64_t x = 88172645463325252ull; // xorshift: bytes no filesystem or device compresses
  for (size_t i = 0; i < 64 * (size_t)MIB; i += 8) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    memcpy(wbuf + i, &x, 8);
  }
  mkdir(dir, 0755);
  double sw[16], sr[16], fw[16], fr[16], w_s, r_s;
  int dropped = 0;
  printf("spill: %d values of 16..64 MiB, %.2f GiB per side, %d repetitions, in %s\n", n,
         (double)total / (1 << 30), reps, dir);
  for (int r = 0; r < reps; r++) {
    store_side(dir, n, wbuf, rbuf, &w_s, &r_s, &dropped);
    sw[r] = (double)total / MIB / w_s, sr[r] = (double)total / MIB / r_s;
    file_side(dir, n, wbuf, rbuf, &w_s, &r_s);
    fw[r] = (double)total / MIB / w_s, fr[r] = (double)total / MIB / r_s;
    printf("rep %d: store write %.0f MiB/s, read %.0f MiB/s; file write %.0f MiB/s, read %.0f MiB/s\n", r + 1,
           sw[r], sr[r], fw[r], fr[r]);
  }
  printf("page cache: %s\n", dropped ? "dropped (drop_caches) and the files' pages evicted (fadvise)"
                                     : "the files' pages evicted (fadvise; drop_caches not writable)");
  double msw = bench_median(sw, reps), msr = bench_median(sr, reps), mfw = bench_median(fw, reps), mfr = bench_median(fr, reps);
  printf("medians: store write %.0f MiB/s, read %.0f MiB/s; file write %.0f MiB/s, read %.0f MiB/s\n", msw, msr,
         mfw, mfr);
  printf("storage: %.2fx of raw write, %.2fx of raw read\n", msw / mfw, msr / mfr);
  free(wbuf);
  free(rbuf);
  return 0;
}

// ---- blob sweep -----------------------------------------------------------------------

static uint64_t io_write_bytes(void) {
  FILE *f = fopen("/proc/self/io", "r");
  if (!f) return 0;
  char line[128];
  uint64_t v = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "write_bytes: %" SCNu64, &v) == 1) break;
  fclose(f);
  return v;
}

static void rocks_ok(char *err, const char *what) {
  if (err) DIE("%s: %s", what, err);
}

static void sweep_key(char k[8], uint32_t ckpt, uint32_t i) {
  for (int b = 0; b < 4; b++) k[b] = (char)(ckpt >> (24 - 8 * b)), k[4 + b] = (char)(i >> (24 - 8 * b));
}

enum { CK_BYTES = 16 * MIB, CKPTS = 6, KEEP = 2 };

static void sweep_one(const char *dir, size_t vsize, int blob, const char *val) {
  char db[4096];
  snprintf(db, sizeof db, "%s/sweep", dir);
  rocksdb_options_t *o = rocksdb_options_create();
  rocksdb_options_set_create_if_missing(o, 1);
  rocksdb_options_set_write_buffer_size(o, 64 * (size_t)MIB);
  rocksdb_options_set_compression(o, rocksdb_no_compression);
  // As the store opens its database (storage/store_db.c).
  rocksdb_options_set_bytes_per_sync(o, (uint64_t)8 << 20);
  rocksdb_options_set_advise_random_on_open(o, 0);
  rocksdb_options_set_allow_mmap_reads(o, 1);
  if (blob) {
    rocksdb_options_set_enable_blob_files(o, 1);
    rocksdb_options_set_min_blob_size(o, 0);
    rocksdb_options_set_enable_blob_gc(o, 0);
  }
  char *err = NULL;
  rocksdb_t *d = rocksdb_open(o, db, &err);
  rocks_ok(err, "open");
  rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
  rocksdb_writeoptions_disable_WAL(wo, 1);
  rocksdb_flushoptions_t *fo = rocksdb_flushoptions_create();
  rocksdb_flushoptions_set_wait(fo, 1);
  rocksdb_compactoptions_t *co = rocksdb_compactoptions_create();
  rocksdb_compactoptions_set_bottommost_level_compaction(co, 3);
  uint32_t per = (uint32_t)(CK_BYTES / vsize);
  uint64_t io0 = io_write_bytes();
  double t0 = eng_now();
  for (uint32_t c = 0; c < CKPTS; c++) {
    for (uint32_t i = 0; i < per; i++) {
      char k[8];
      sweep_key(k, c, i);
      rocksdb_put(d, wo, k, 8, val + (i % 64) * 64, vsize, &err);
      rocks_ok(err, "put");
    }
    rocksdb_flush(d, fo, &err);
    rocks_ok(err, "flush");
    if (c >= KEEP) {
      char lo[8], hi[8];
      sweep_key(lo, c - KEEP, 0);
      sweep_key(hi, c - KEEP + 1, 0);
      rocksdb_writebatch_t *b = rocksdb_writebatch_create();
      rocksdb_writebatch_delete_range(b, lo, 8, hi, 8);
      rocksdb_write(d, wo, b, &err);
      rocksdb_writebatch_destroy(b);
      rocks_ok(err, "delete_range");
      rocksdb_compact_range_opt(d, co, lo, 8, hi, 8);
    }
  }
  double w_s = eng_now() - t0;
  double amp = (double)(io_write_bytes() - io0) / ((double)CKPTS * per * vsize);
  drop_cache(db);
  rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
  rocksdb_readoptions_set_verify_checksums(ro, 0); // the store checks its own crc32c instead
  t0 = eng_now();
  for (uint32_t i = 0; i < per; i++) {
    char k[8];
    sweep_key(k, CKPTS - 1, i);
    rocksdb_pinnableslice_t *p = rocksdb_get_pinned(d, ro, k, 8, &err);
    rocks_ok(err, "get");
    if (!p) DIE("value %u of the last checkpoint is missing", i);
    rocksdb_pinnableslice_destroy(p);
  }
  double r_s = eng_now() - t0;
  printf("%8zu  %-6s  write %6.0f MiB/s  %5.2f bytes written per byte  cold read %6.0f MiB/s\n", vsize,
         blob ? "blob" : "inline", (double)CKPTS * per * vsize / MIB / w_s, amp, (double)per * vsize / MIB / r_s);
  fflush(stdout);
  rocksdb_readoptions_destroy(ro);
  rocksdb_compactoptions_destroy(co);
  rocksdb_flushoptions_destroy(fo);
  rocksdb_writeoptions_destroy(wo);
  rocksdb_close(d);
  rocksdb_options_destroy(o);
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", db);
  run(cmd);
}

static int blob_sweep(const char *dir) {
  static const size_t sizes[] = {256, 1024, 4096, 16384, 65536, 262144, 1048576};
  mkdir(dir, 0755);
  char *val = malloc(64 * 64 + (1 << 20));
  if (!val) DIE("cannot allocate");
  for (size_t i = 0; i < 64 * 64 + (1 << 20); i++) val[i] = (char)(i * 2654435761u >> 13);
  printf("blob sweep: %d checkpoints of %d MiB, keeping the last %d, in %s\n", CKPTS, CK_BYTES / MIB, KEEP, dir);
  for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
    for (int blob = 0; blob <= 1; blob++) sweep_one(dir, sizes[s], blob, val);
  free(val);
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 3 && !strcmp(argv[1], "spill"))
    return spill(argv[2], argc > 3 ? atoi(argv[3]) : 2048, argc > 4 ? atoi(argv[4]) : 3);
  if (argc == 3 && !strcmp(argv[1], "blob-sweep")) return blob_sweep(argv[2]);
  fprintf(stderr, "usage: bench_store_rate spill DIR [MIB] [REPS] | blob-sweep DIR\n");
  return 2;
}
