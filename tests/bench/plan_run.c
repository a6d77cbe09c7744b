// The planner's plan run for real: the demo-sized model on the cpu
// backend under a device cap that cannot hold every boundary on the device,
// trained with the program's plan and with MegaTrain's policy (a boundary
// every 4 layers on the device), alternating, in one run. Prints per policy
// the measured step time (median) beside the simulator's prediction, and the
// measured bytes of each tier beside the predicted peaks; the profile is this
// machine's, calibrated first (compute with the engine's kernels, the spill
// tier through a RocksDB store in a temporary directory).
//
// usage: bench_plan_run SOURCE_DIR [STEPS]
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "engine.h"
#include "exec/exec_plan.h"
#include "plan/planner.h"
#include "plan/profile.h"
#include "storage/store.h"

enum { WARMUP = 2, ROUNDS = 2, SPILL_PROBE = 64 << 20 };

#define DIE(...)                                                                                                       \
  do {                                                                                                                 \
    fprintf(stderr, "bench_plan_run: " __VA_ARGS__);                                                                   \
    fprintf(stderr, "\n");                                                                                             \
    exit(1);                                                                                                           \
  } while (0)

typedef struct measured {
  double step[64];  // seconds of each measured step
  int n;
  size_t dev, host, store; // arena peak; boundary bytes kept in host memory / spilled, most in a step
} measured;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(const measured *m) {
  double v[64];
  memcpy(v, m->step, sizeof(double) * (size_t)m->n);
  qsort(v, (size_t)m->n, sizeof *v, cmp_double);
  return m->n % 2 ? v[m->n / 2] : 0.5 * (v[m->n / 2 - 1] + v[m->n / 2]);
}

static void spec_base(eng_spec *s, const char *src, const eng_config *c, int batch, int T, size_t cap, int steps) {
  static char data[4096];
  snprintf(data, sizeof data, "%s/data/demo/licenses.txt", src);
  eng_spec_defaults(s);
  s->config = *c;
  s->train_path = data;
  s->seq_len = T;
  s->batch = batch;
  s->device_cap = cap;
  s->lr = 1e-3f;
  s->total_steps = steps;
}

// Trains `steps` steps under plan p; the steps after the warm-up are measured.
static void run(const eng_spec *base, const eng_plan *p, store *st, int steps, measured *m) {
  eng_err e = {0};
  eng_spec s = *base;
  const int L = s.config.n_layers;
  eng_place place[L];
  uint8_t keep[L];
  if (eng_exec_plan_policy(p, L, place, keep, &s.micro_batches, &e)) DIE("%s", e.msg);
  s.plan_place = place;
  s.plan_keep = keep;
  eng_store es;
  if (store_engine_open(&es, st, "bench", 0, &e)) DIE("%s", e.msg);
  s.spill = &es;
  eng_run *r;
  if (eng_open(&s, &r, &e)) DIE("%s: %s", p->method, e.msg);
  for (int i = 0; i < steps; i++) {
    eng_metrics mm;
    if (eng_step(r, &mm, &e)) DIE("%s: %s", p->method, e.msg);
    if (i < WARMUP) continue;
    m->step[m->n++] = mm.t_total;
    if (mm.peak_arena > m->dev) m->dev = mm.peak_arena;
    if (mm.host_act > m->host) m->host = mm.host_act;
    if (mm.store_act > m->store) m->store = mm.store_act;
  }
  eng_close(r);
  es.close(es.ctx);
}

static double pct(double predicted, double got) { return got > 0 ? 100.0 * (predicted - got) / got : 0.0; }

static void report(const char *name, const eng_plan *p, const measured *m) {
  double t = median(m);
  double dev = (double)p->peak_dev + (double)p->dev_fixed;
  printf("%-8s measured step %.3f s (median of %d), predicted %.3f s (%+.1f%%); device %.1f MiB, predicted %.1f "
         "(%+.1f%%); host %.1f MiB, predicted %.1f; store %.1f MiB, predicted %.1f\n",
         name, t, m->n, p->step_time, pct(p->step_time, t), m->dev / 1048576.0, dev / 1048576.0, pct(dev, (double)m->dev),
         m->host / 1048576.0, p->peak_host / 1048576.0, m->store / 1048576.0, p->peak_nvme / 1048576.0);
}

int main(int argc, char **argv) {
  if (argc < 2) DIE("usage: bench_plan_run SOURCE_DIR [STEPS]");
  const char *src = argv[1];
  const int steps = argc > 2 ? atoi(argv[2]) : 6;
  if (steps <= WARMUP || (steps - WARMUP) * ROUNDS > 64) DIE("STEPS must lie in (%d, %d]", WARMUP, WARMUP + 64 / ROUNDS);
  // make demo's model (deploy/example-job.yaml): ~10M parameters, Qwen3-style.
  const eng_config c = {ENG_ARCH_QWEN3, 256, 384, 6, 6, 2, 64, 1024, 4096, 10000.0f, 1e-6f, 0.02f, 1, 0, 1};
  const int batch = 8, T = 256;
  eng_err e = {0};

  // The cap: what every boundary on the device with nothing recomputed
  // would need, less a third, so that the plan must choose.
  eng_spec s;
  spec_base(&s, src, &c, batch, T, (size_t)1 << 40, steps);
  s.keep_acts = 1;
  size_t all_dev;
  if (eng_spec_device_bytes(&s, &all_dev, &e)) DIE("%s", e.msg);
  size_t cap = all_dev / 3 * 2;
  spec_base(&s, src, &c, batch, T, cap, steps);

  char dir[] = "/tmp/traind-plan-run-XXXXXX";
  if (!mkdtemp(dir)) DIE("mkdtemp failed");
  store *st;
  if (store_open(&st, dir, NULL, &e)) DIE("%s", e.msg);
  eng_profile prof;
  double rd, wr;
  if (eng_profile_calibrate_cpu(&c, batch, T, (double)cap, 20, &prof, &e) ||
      store_act_probe(st, SPILL_PROBE, &rd, &wr, &e))
    DIE("calibration: %s", e.msg);
  struct statvfs fs;
  eng_profile_set_nvme(&prof, rd, wr, statvfs(dir, &fs) == 0 ? (double)fs.f_bavail * (double)fs.f_frsize : 0);
  printf("model: demo (%d layers, d %d), batch %d x %d; device cap %.1f MiB (every boundary and activation on the "
         "device would need %.1f MiB)\n",
         c.n_layers, c.d_model, batch, T, cap / 1048576.0, all_dev / 1048576.0);
  printf("profile: %s; GEMM %.1f GFLOP/s, attention %.1f GFLOP/s, copies %.1f GB/s, spill write %.2f / read %.2f GB/s\n",
         prof.name, prof.gemm_flops / 1e9, prof.attn_flops / 1e9, prof.h2d / 1e9, wr / 1e9, rd / 1e9);

  eng_plan_opts o;
  eng_plan_opts_defaults(&o);
  eng_plan milp, every4;
  if (eng_plan_make(&c, "demo", batch, T, &prof, &o, &milp, &e)) DIE("the program's plan: %s", e.msg);
  if (eng_plan_baseline(&c, "demo", batch, T, &prof, ENG_POLICY_EVERY_K, 4, 0, &every4, &e))
    DIE("every-4: %s", e.msg);
  char *table;
  if (eng_plan_table(&milp, &table, &e)) DIE("%s", e.msg);
  printf("%s", table);
  free(table);

  measured mm = {0}, m4 = {0};
  for (int r = 0; r < ROUNDS; r++) { // alternating, so that drift on a noisy machine hits both
    run(&s, &milp, st, steps, &mm);
    run(&s, &every4, st, steps, &m4);
  }
  report("program", &milp, &mm);
  report("every-4", &every4, &m4);
  double speed = median(&m4) / median(&mm), predicted = every4.step_time / milp.step_time;
  double worst = fmax(fabs(pct(milp.step_time, median(&mm))), fabs(pct(every4.step_time, median(&m4))));
  printf("plan_run: program's plan %.2fx over every-4 measured (%.2fx predicted); step time predicted within %.1f%%\n",
         speed, predicted, worst);
  eng_plan_free(&milp);
  eng_plan_free(&every4);
  store_close(st);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  return system(cmd) == 0 ? 0 : 1;
}
