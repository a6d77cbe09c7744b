// The planner's plan run for real: the demo-sized model on the cpu
// backend under a device cap that cannot hold every boundary on the device,
// with its copies to and from the arena on a link capped to move one
// boundary in about one layer's forward (PCIe-like) and the spill store's
// lanes a little slower (NVMe-like), trained with the program's plan, with
// MegaTrain's policy (a boundary every 4 layers on the device) and with
// every boundary in host memory, alternating, in one run. Prints per policy
// the measured step time (median) beside the simulator's prediction, the
// time compute waited for activation transfers, and the measured arena
// beside the predicted device bytes; the profile is this machine's
// compute, calibrated first, with the capped links. The last step of each
// policy is drawn, measured beside predicted, as SVG timelines in
// TIMELINE_DIR (<policy>-measured.svg, <policy>-predicted.svg).
//
// usage: bench_plan_run SOURCE_DIR [STEPS [TIMELINE_DIR]]
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "engine.h"
#include "plan/cost.h"
#include "plan/sim.h"
#include "plan/planner.h"
#include "plan/profile.h"
#include "storage/store.h"

enum { WARMUP = 2, ROUNDS = 2 };

#define DIE(...)                                                                                                       \
  do {                                                                                                                 \
    fprintf(stderr, "bench_plan_run: " __VA_ARGS__);                                                                   \
    fprintf(stderr, "\n");                                                                                             \
    exit(1);                                                                                                           \
  } while (0)

typedef struct measured {
  double step[64];  // seconds of each measured step
  double wait[64];  // of it, compute waiting for activation transfers
  double fwd[64], bwd[64], opt[64]; // the forward, the head and backward, waiting for weights
  int n;
  size_t dev, host, store; // arena peak; boundary bytes kept in host memory / spilled, most in a step
} measured;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median_of(const double *x, int n) {
  double v[64];
  memcpy(v, x, sizeof(double) * (size_t)n);
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double median(const measured *m) { return median_of(m->step, m->n); }

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

static const char *timeline_dir;        // where the timelines go
static const eng_config *bench_cfg;      // the model
static const eng_profile *bench_prof;    // the profile the plans were made on

static void write_svg(const char *name, const char *kind, char *svg) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s-%s.svg", timeline_dir, name, kind);
  FILE *f = fopen(path, "w");
  if (!f || fputs(svg, f) < 0 || fclose(f)) DIE("cannot write %s", path);
  free(svg);
}

// The last step's measured timeline beside the plan's predicted one:
// <name>-measured.svg and <name>-predicted.svg in timeline_dir.
static void timelines(const char *name, eng_run *r, const eng_plan *p, const eng_metrics *mm) {
  eng_err e = {0};
  char *svg;
  if (eng_timeline_svg(r, mm, &svg, &e)) DIE("%s: %s", name, e.msg);
  write_svg(name, "measured", svg);
  eng_plan_cost k;
  eng_plan_sim want;
  if (eng_plan_cost_make(bench_cfg, p->batch, p->seq_len, p->micro_batch, bench_prof, &k, &e) ||
      eng_plan_simulate(p, &k, &want, &e) || eng_plan_svg(p, &want, &svg, &e))
    DIE("%s: %s", name, e.msg);
  write_svg(name, "predicted", svg);
  eng_plan_sim_free(&want);
}

// Trains `steps` steps under plan p; the steps after the warm-up are measured.
static void run(const char *name, const eng_spec *base, const eng_plan *p, store *st, int steps, measured *m) {
  eng_err e = {0};
  eng_spec s = *base;
  s.plan = p;
  s.micro_batches = p->n_micro;
  s.device_cap = p->dev_fixed + p->peak_dev; // exactly what the plan says it needs
  eng_store es;
  if (store_engine_open(&es, st, "bench", 0, &e)) DIE("%s", e.msg);
  s.spill = &es;
  eng_run *r;
  if (eng_open(&s, &r, &e)) DIE("%s: %s", p->method, e.msg);
  for (int i = 0; i < steps; i++) {
    eng_metrics mm;
    if (eng_step(r, &mm, &e)) DIE("%s: %s", p->method, e.msg);
    if (i < WARMUP) continue;
    m->wait[m->n] = mm.t_act_wait;
    m->fwd[m->n] = mm.t_fwd;
    m->bwd[m->n] = mm.t_loss + mm.t_bwd;
    m->opt[m->n] = mm.t_opt_wait;
    m->step[m->n++] = mm.t_total;
    if (mm.peak_arena > m->dev) m->dev = mm.peak_arena;
    if (mm.host_act > m->host) m->host = mm.host_act;
    if (mm.store_act > m->store) m->store = mm.store_act;
    if (i == steps - 1) timelines(name, r, p, &mm);
  }
  eng_close(r);
  es.close(es.ctx);
}

static double pct(double predicted, double got) { return got > 0 ? 100.0 * (predicted - got) / got : 0.0; }

static void report(const char *name, const eng_plan *p, const measured *m) {
  double t = median(m);
  double dev = (double)p->peak_dev + (double)p->dev_fixed;
  printf("%-8s %d micro-batches of %d: forward %.3f s, head and backward %.3f s, waiting for weights %.3f s "
         "(medians)\n", name, p->n_micro, p->micro_batch, median_of(m->fwd, m->n), median_of(m->bwd, m->n),
         median_of(m->opt, m->n));
  printf("%-8s measured step %.3f s (median of %d), predicted %.3f s (%+.1f%%); waiting for activation transfers "
         "%.3f s (predicted exposed %.3f s); device %zu bytes, predicted %.0f (%s); host %.1f MiB, predicted %.1f; "
         "store %.1f MiB, predicted %.1f\n",
         name, t, m->n, p->step_time, pct(p->step_time, t), median_of(m->wait, m->n), p->t_exposed, m->dev, dev,
         (double)m->dev == dev ? "equal" : "DIFFERENT", m->host / 1048576.0, p->peak_host / 1048576.0,
         m->store / 1048576.0, p->peak_nvme / 1048576.0);
}

int main(int argc, char **argv) {
  if (argc < 2) DIE("usage: bench_plan_run SOURCE_DIR [STEPS [TIMELINE_DIR]]");
  const char *src = argv[1];
  const int steps = argc > 2 ? atoi(argv[2]) : 6;
  timeline_dir = argc > 3 ? argv[3] : ".";
  if (steps <= WARMUP || (steps - WARMUP) * ROUNDS > 64) DIE("STEPS must lie in (%d, %d]", WARMUP, WARMUP + 64 / ROUNDS);
  // make demo's model (deploy/example-job.yaml): ~10M parameters, Qwen3-style.
  const eng_config c = {.arch = ENG_ARCH_QWEN3, .vocab = 256, .d_model = 384, .n_layers = 6, .n_heads = 6, .n_kv_heads = 2,
                        .head_dim = 64, .d_ff = 1024, .max_pos = 4096,
                        .rope_theta = 10000.0f, .rms_eps = 1e-6f, .init_std = 0.02f, .tie_embeddings = 1, .qkv_bias = 0, .qk_norm = 1};
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
  if (eng_profile_calibrate_cpu(&c, batch, T, (double)cap, 20, &prof, &e)) DIE("calibration: %s", e.msg);
  // The links: one boundary across in about one layer's forward; the store
  // two thirds of that. The profile plans with them, the run has them.
  eng_plan_cost k;
  if (eng_plan_cost_make(&c, batch, T, batch, &prof, &k, &e)) DIE("%s", e.msg);
  const double link = k.bnd / k.t_fwd, spill = link * 2 / 3;
  prof.h2d = prof.d2h = link;
  struct statvfs fs;
  eng_profile_set_nvme(&prof, spill, spill, statvfs(dir, &fs) == 0 ? (double)fs.f_bavail * (double)fs.f_frsize : 0);
  s.link_bps = link;
  s.spill_bps = spill;
  printf("model: demo (%d layers, d %d), batch %d x %d; device cap %.1f MiB (every boundary and activation on the "
         "device would need %.1f MiB)\n",
         c.n_layers, c.d_model, batch, T, cap / 1048576.0, all_dev / 1048576.0);
  printf("profile: %s; GEMM %.1f GFLOP/s, attention %.1f GFLOP/s; links capped: copies %.2f GB/s each way (a "
         "boundary of %.1f MiB in %.0f ms, a layer's forward), store %.2f GB/s each way\n",
         prof.name, prof.gemm_flops / 1e9, prof.attn_flops / 1e9, link / 1e9, k.bnd / 1048576.0, 1e3 * k.t_fwd,
         spill / 1e9);

  bench_cfg = &c;
  bench_prof = &prof;
  eng_plan_opts o;
  eng_plan_opts_defaults(&o);
  eng_plan milp, every4, host;
  if (eng_plan_make(&c, "demo", batch, T, &prof, &o, &milp, &e)) DIE("the program's plan: %s", e.msg);
  // The baselines at the program's micro-batch split, so that the runs
  // differ by where boundaries live and when they move, not by the split
  // (whose cost on this cpu the profile models less well than placement).
  if (eng_plan_baseline(&c, "demo", batch, T, &prof, ENG_POLICY_EVERY_K, 4, milp.micro_batch, &every4, &e))
    DIE("every-4: %s", e.msg);
  if (eng_plan_baseline(&c, "demo", batch, T, &prof, ENG_POLICY_ALL_HOST, 0, milp.micro_batch, &host, &e))
    DIE("all-host: %s", e.msg);
  char *table;
  if (eng_plan_table(&milp, &table, &e)) DIE("%s", e.msg);
  printf("%s", table);
  free(table);

  measured mm = {0}, m4 = {0}, mh = {0};
  for (int r = 0; r < ROUNDS; r++) { // alternating, so that drift on a noisy machine hits all
    run("program", &s, &milp, st, steps, &mm);
    run("every-4", &s, &every4, st, steps, &m4);
    run("all-host", &s, &host, st, steps, &mh);
  }
  report("program", &milp, &mm);
  report("every-4", &every4, &m4);
  report("all-host", &host, &mh);
  double speed = median(&m4) / median(&mm), predicted = every4.step_time / milp.step_time;
  double worst = fmax(fabs(pct(milp.step_time, median(&mm))), fabs(pct(every4.step_time, median(&m4))));
  worst = fmax(worst, fabs(pct(host.step_time, median(&mh))));
  printf("plan_run: program's plan %.2fx over every-4 measured (%.2fx predicted); step time predicted within %.1f%%; "
         "exposed transfer %.1f%% of step\n",
         speed, predicted, worst, 100.0 * median_of(mm.wait, mm.n) / median(&mm));
  eng_plan_free(&host);
  eng_plan_free(&milp);
  eng_plan_free(&every4);
  store_close(st);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  return system(cmd) == 0 ? 0 : 1;
}
