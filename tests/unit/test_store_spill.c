// Bounded spill: step after step of activation spill (put, get back in
// reverse, drop) must leave the database's disk usage and the process's
// resident memory within fixed bounds, or the NVMe tier would fill the disk
// or the host over a long run. Two runs of 50 steps each:
//   engine  the tiny model with every boundary spilled to the store
//           (ENG_PLACE_STORE), 1 MiB act memtables so that they flush every
//           few steps
//   values  12 x 1 MiB values per step, 4 MiB memtables, contents checked
// Measured after every step: the bytes the directory occupies on disk (all
// files: SST, blob, WAL, MANIFEST, LOG) and the process's RSS. Asserted:
// from step 10 on, disk stays under the bound below and neither disk nor
// RSS grows by more than a fixed slack over the rest of the run.
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <inttypes.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "storage/store.h"
#include "tiny.h"
#include "unit/tmpdir.h"

// Under AddressSanitizer freed memory sits in a quarantine (256 MiB by
// default) before reuse, which would read as growth; keep it small here.
const char *__asan_default_options(void) { return "quarantine_size_mb=4"; }

enum { STEPS = 50, WARM = 10 };
enum { MIB = 1 << 20 };

static eng_err e;

static uint64_t disk_usage(const char *dir) {
  DIR *d = opendir(dir);
  CHECK(d, "cannot list %s", dir);
  uint64_t total = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    char p[1024];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
    if (de->d_name[0] != '.' && stat(p, &sb) == 0) total += (uint64_t)sb.st_blocks * 512;
  }
  closedir(d);
  return total;
}

static uint64_t rss(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long size = 0, res = 0;
  CHECK(f && fscanf(f, "%lu %lu", &size, &res) == 2, "cannot read /proc/self/statm");
  fclose(f);
  return (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE);
}

typedef struct track {
  const char *name;
  uint64_t disk[STEPS], mem[STEPS];
} track;

// From step WARM on: disk under disk_cap, and no growth of disk or RSS
// beyond the slacks between step WARM and any later step.
static void check_bounded(const track *t, uint64_t disk_cap, uint64_t disk_slack, uint64_t mem_slack) {
  uint64_t dmax = 0, mmax = 0;
  for (int i = WARM; i < STEPS; i++) {
    if (t->disk[i] > dmax) dmax = t->disk[i];
    if (t->mem[i] > mmax) mmax = t->mem[i];
  }
  printf("%s: disk %.1f MiB after step 1, %.1f after step %d, at most %.1f over steps %d-%d, %.1f at the "
         "end; RSS %.1f MiB after step %d, at most %.1f, %.1f at the end\n", t->name, t->disk[0] / (double)MIB,
         t->disk[WARM] / (double)MIB, WARM + 1, dmax / (double)MIB, WARM + 1, STEPS,
         t->disk[STEPS - 1] / (double)MIB, t->mem[WARM] / (double)MIB, WARM + 1, mmax / (double)MIB,
         t->mem[STEPS - 1] / (double)MIB);
  CHECK(dmax <= disk_cap, "%s: disk usage reached %.1f MiB, bound %.1f MiB", t->name, dmax / (double)MIB,
        disk_cap / (double)MIB);
  CHECK(dmax <= t->disk[WARM] + disk_slack, "%s: disk grew by %.1f MiB after step %d (slack %.1f MiB)", t->name,
        (dmax - t->disk[WARM]) / (double)MIB, WARM + 1, disk_slack / (double)MIB);
  CHECK(mmax <= t->mem[WARM] + mem_slack, "%s: RSS grew by %.1f MiB after step %d (slack %.1f MiB)", t->name,
        (mmax - t->mem[WARM]) / (double)MIB, WARM + 1, mem_slack / (double)MIB);
}

typedef struct engine_ctx {
  const char *dir;
  track *t;
  const eng_store *store; // the store adapter, which spill_put forwards to
  uint64_t spilled;       // bytes the executor spilled
} engine_ctx;

static engine_ctx ctx;

static int spill_put(void *st, int64_t step, int boundary, int micro, const void *data, size_t n, eng_err *err) {
  ctx.spilled += n;
  return ctx.store->act_put(st, step, boundary, micro, data, n, err);
}

static int after_step(void *unused, const eng_metrics *m) {
  (void)unused;
  engine_ctx *c = &ctx;
  int i = (int)m->step - 1;
  if (i >= 0 && i < STEPS) {
    c->t->disk[i] = disk_usage(c->dir);
    c->t->mem[i] = rss();
  }
  return 0;
}

static void engine_run(void) {
  const char *dir = tmp_path("engine");
  store_options o;
  store_options_defaults(&o);
  o.act_buffer_bytes = 1 * MIB;
  store *st;
  CHECK_OK(store_open(&st, dir, &o, &e), &e);
  eng_store es;
  CHECK_OK(store_engine_open(&es, st, "spill", 0, &e), &e);
  static track t = {.name = "engine"};
  ctx = (engine_ctx){dir, &t, &es, 0};
  eng_store counting = es;
  counting.act_put = spill_put;
  eng_spec s;
  tiny_spec(&s, 2);
  s.total_steps = STEPS;
  s.ckpt_place = ENG_PLACE_STORE;
  s.spill = &counting;
  s.progress = after_step;
  eng_run *r;
  CHECK_OK(eng_open(&s, &r, &e), &e);
  for (int i = 0; i < STEPS; i++) CHECK_OK(eng_step(r, NULL, &e), &e);
  eng_close(r);
  size_t per_step = (size_t)(ctx.spilled / STEPS);
  printf("engine: %d steps spilling %zu KiB each\n", STEPS, per_step >> 10);
  // The act family holds at most one step; the rest is the other families,
  // the WAL, MANIFEST and LOG.
  check_bounded(&t, per_step + 8 * MIB, 1 * MIB, 16 * MIB);
  es.close(es.ctx);
  store_close(st);
}

static void fill(uint32_t *p, size_t words, uint32_t seed) {
  for (size_t i = 0; i < words; i++) p[i] = seed * 2654435761u + (uint32_t)i;
}

static void values_run(void) {
  enum { BOUNDARIES = 6, MICRO = 2, VALUE = 1 * MIB };
  const char *dir = tmp_path("values");
  store_options o;
  store_options_defaults(&o);
  o.act_buffer_bytes = 4 * MIB;
  store *st;
  CHECK_OK(store_open(&st, dir, &o, &e), &e);
  static uint32_t buf[VALUE / 4], want[VALUE / 4];
  static track t = {.name = "values"};
  uint64_t peak = 0;
  for (int step = 0; step < STEPS; step++) {
    for (int b = 0; b < BOUNDARIES; b++)
      for (int m = 0; m < MICRO; m++) {
        fill(buf, VALUE / 4, (uint32_t)(step * 100 + b * 10 + m));
        CHECK_OK(store_act_put(st, "job", step, b, m, buf, VALUE, &e), &e);
      }
    uint64_t full = disk_usage(dir);
    if (full > peak) peak = full;
    for (int b = BOUNDARIES - 1; b >= 0; b--)
      for (int m = 0; m < MICRO; m++) {
        CHECK_OK(store_act_get(st, "job", step, b, m, buf, VALUE, &e), &e);
        fill(want, VALUE / 4, (uint32_t)(step * 100 + b * 10 + m));
        CHECK(!memcmp(buf, want, VALUE), "step %d boundary %d micro %d read back wrong", step, b, m);
      }
    CHECK_OK(store_act_drop(st, "job", step, &e), &e);
    t.disk[step] = disk_usage(dir);
    t.mem[step] = rss();
  }
  size_t per_step = (size_t)BOUNDARIES * MICRO * VALUE;
  printf("values: %d steps spilling %zu MiB each in %d MiB values; disk at most %.1f MiB before a drop\n", STEPS,
         per_step / MIB, VALUE / MIB, peak / (double)MIB);
  CHECK(peak <= per_step + 8 * MIB, "values: disk reached %.1f MiB before a drop", peak / (double)MIB);
  check_bounded(&t, per_step + 8 * MIB, 1 * MIB, 16 * MIB);
  store_close(st);
}

int main(void) {
  tmp_make();
  engine_run();
  values_run();
  tmp_cleanup();
  return 0;
}
