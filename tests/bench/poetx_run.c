// The runs of tests/bench/poetx.sh.
//
// bench_poetx_run train METHOD BLOCK PRESET STEPS BATCH SEQ DATA
//   trains PRESET (traind-train's: demo, bench40m) on DATA with METHOD
//   (adamw8, or poetx / poetx-bf16 with rotation blocks of BLOCK and an
//   fp32 / bf16 base) from seed 1, merging every 12 steps, and prints "key
//   value" lines: params, train_state (eng_train_state_bytes), host
//   (eng_spec_host_bytes: what the run holds), peak_rss (measured, this
//   process), base_rss (resident before the run opened: libraries,
//   runtime), arena_rss (the cpu backend's device arena resident at the
//   end, mincore).
// bench_poetx_run speed BLOCK PRESET STEPS BATCH SEQ DATA METHOD...
//   the same runs, every METHOD's open in this process and their steps
//   interleaved: "tok_s METHOD X" (median over the steps after the first
//   two), "loss METHOD X" (the last step's), "tokens N".
// bench_poetx_run largest BLOCK BATCH SEQ PROFILE
//   for the dense Qwen3 shapes (0.6B .. 32B, their config.json's
//   dimensions), per method, the host training state the planner counts on
//   the GPU profile PROFILE with this machine's MemAvailable as its host
//   memory ("shape METHOD NAME PARAMS HOST B/PARAM fits|no": whether the
//   planner finds a plan for BATCH x SEQ), and the largest it plans:
//   "largest METHOD NAME AVAIL".
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "bench.h"
#include "compute/scaling.h"
#include "engine.h"
#include "plan/cost.h"
#include "plan/planner.h"

static int preset(const char *name, eng_config *c) {
  // traind-train's presets of the same names.
  if (!strcmp(name, "demo"))
    *c = (eng_config){.arch = ENG_ARCH_QWEN3, .vocab = 256, .d_model = 384, .n_layers = 6, .n_heads = 6, .n_kv_heads = 2,
                      .head_dim = 64, .d_ff = 1024, .max_pos = 4096,
                      .rope_theta = 10000.0f, .rms_eps = 1e-6f, .init_std = 0.02f, .tie_embeddings = 1, .qkv_bias = 0, .qk_norm = 1};
  else if (!strcmp(name, "bench40m"))
    *c = (eng_config){.arch = ENG_ARCH_QWEN3, .vocab = 16384, .d_model = 512, .n_layers = 8, .n_heads = 8, .n_kv_heads = 4,
                      .head_dim = 64, .d_ff = 1536, .max_pos = 4096,
                      .rope_theta = 10000.0f, .rms_eps = 1e-6f, .init_std = 0.02f, .tie_embeddings = 0, .qkv_bias = 0, .qk_norm = 1};
  else
    return -1;
  return 0;
}

// adamw8, poetx (an fp32 base) or poetx-bf16 (a bf16 base).
static void method_of(eng_spec *s, const char *method, int block) {
  s->optimizer = ENG_OPT_ADAMW8;
  if (!strncmp(method, "poetx", 5)) {
    s->method = ENG_METHOD_POETX;
    s->poet_block = block;
    s->poet_base_bf16 = !strcmp(method, "poetx-bf16");
  }
}

// This process's resident bytes now (/proc/self/statm).
static size_t rss_now(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long long size = 0, res = 0;
  if (f && fscanf(f, "%llu %llu", &size, &res) != 2) res = 0;
  if (f) fclose(f);
  return (size_t)res * (size_t)sysconf(_SC_PAGESIZE);
}

// Bytes of [base, base + bytes) resident in memory now.
static size_t resident(const void *base, size_t bytes) {
  long page = sysconf(_SC_PAGESIZE);
  uintptr_t lo = (uintptr_t)base & ~(uintptr_t)(page - 1), hi = (uintptr_t)base + bytes;
  size_t pages = (hi - lo + (size_t)page - 1) / (size_t)page, n = 0;
  unsigned char *v = malloc(pages ? pages : 1);
  if (v && mincore((void *)lo, hi - lo, v) == 0)
    for (size_t i = 0; i < pages; i++) n += v[i] & 1;
  free(v);
  return n * (size_t)page;
}

// The bench's spec: PRESET trained on DATA with METHOD for STEPS steps of
// BATCH x SEQ tokens from seed 1; POET-X merges every 12 steps.
static int spec_of(eng_spec *s, const char *method, int block, const char *preset_name, int steps, int batch,
                   int seq, const char *data) {
  eng_spec_defaults(s);
  if (preset(preset_name, &s->config)) return 2;
  method_of(s, method, block);
  s->batch = batch;
  s->seq_len = seq;
  s->train_path = data;
  s->seed = 1;
  s->lr = 2e-3f;
  s->min_lr = 2e-4f;
  s->warmup_steps = 5;
  s->total_steps = steps;
  s->poet_lr = 2e-3f;
  s->poet_merge_every = 12;
  s->device_cap = (size_t)4 << 30;
  return 0;
}

static int train(int argc, char **argv) {
  if (argc != 9) return 2;
  eng_spec s;
  int steps = atoi(argv[5]);
  if (spec_of(&s, argv[2], atoi(argv[3]), argv[4], steps, atoi(argv[6]), atoi(argv[7]), argv[8])) return 2;
  eng_err e = {0};
  size_t host, base_rss = rss_now(); // the libraries and the runtime, before any of the run
  eng_run *r;
  if (eng_spec_host_bytes(&s, &host, &e) || eng_open(&s, &r, &e)) {
    fprintf(stderr, "bench_poetx_run: %s\n", e.msg);
    return 1;
  }
  for (int i = 0; i < steps; i++) {
    eng_metrics m;
    if (eng_step(r, &m, &e)) {
      fprintf(stderr, "bench_poetx_run: %s\n", e.msg);
      return 1;
    }
  }
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  const void *arena;
  size_t arena_bytes;
  eng_debug_arena(r, &arena, &arena_bytes);
  printf("params %zu\ntrain_state %zu\nhost %zu\npeak_rss %lld\nbase_rss %zu\narena_rss %zu\n", eng_param_count(r),
         eng_train_state_bytes(r), host, (long long)ru.ru_maxrss * 1024, base_rss, resident(arena, arena_bytes));
  eng_close(r);
  return 0;
}

// Every method's run open at once and their steps interleaved, so that the
// machine's load, which drifts by more than the methods differ, weighs on
// each alike.
static int speed(int argc, char **argv) {
  if (argc < 9) return 2;
  int n = argc - 8, steps = atoi(argv[4]);
  eng_run *r[8];
  double *tps[8], loss[8];
  if (n > 8) return 2;
  for (int k = 0; k < n; k++) {
    eng_spec s;
    eng_err e = {0};
    if (spec_of(&s, argv[8 + k], atoi(argv[2]), argv[3], steps, atoi(argv[5]), atoi(argv[6]), argv[7])) return 2;
    if (eng_open(&s, &r[k], &e)) {
      fprintf(stderr, "bench_poetx_run: %s: %s\n", argv[8 + k], e.msg);
      return 1;
    }
    tps[k] = calloc((size_t)steps, sizeof *tps[k]);
  }
  for (int i = 0; i < steps; i++)
    for (int k = 0; k < n; k++) {
      eng_metrics m;
      eng_err e = {0};
      if (eng_step(r[k], &m, &e)) {
        fprintf(stderr, "bench_poetx_run: %s: %s\n", argv[8 + k], e.msg);
        return 1;
      }
      tps[k][i] = m.tokens_per_s;
      loss[k] = m.loss;
    }
  for (int k = 0; k < n; k++) {
    // The steps after the first two (warm-up), merges' steps included.
    printf("tok_s %s %.1f\nloss %s %.6f\n", argv[8 + k], bench_median(tps[k] + 2, steps - 2), argv[8 + k], loss[k]);
    free(tps[k]);
    eng_close(r[k]);
  }
  printf("tokens %lld\n", (long long)steps * atoi(argv[5]) * atoi(argv[6]));
  return 0;
}

static size_t mem_available(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  char line[256];
  size_t kb = 0;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %zu kB", &kb) == 1) break;
  if (f) fclose(f);
  return kb * 1024;
}

static int largest(int argc, char **argv) {
  if (argc != 6) return 2;
  eng_qwen3_shape q3[8];
  int n_q3 = eng_qwen3_published(q3, 8, 151936);
  eng_profile prof;
  eng_err e = {0};
  if (eng_profile_load(argv[5], &prof, &e)) {
    fprintf(stderr, "bench_poetx_run: %s\n", e.msg);
    return 1;
  }
  // This machine's host memory, all of what is available now, for the
  // training state and host activations; the GPU's budgets as profiled.
  size_t avail = mem_available();
  prof.host_bytes = (double)avail;
  prof.host_reserve = 0;
  const char *methods[] = {"adamw8", "poetx", "poetx-bf16"};
  for (int k = 0; k < 3; k++) {
    int best = -1;
    for (int i = 0; i < n_q3; i++) {
      eng_spec s;
      eng_spec_defaults(&s);
      s.config = q3[i].config;
      method_of(&s, methods[k], atoi(argv[2]));
      eng_spec_profile_method(&s, &prof);
      eng_plan_opts o;
      eng_plan_opts_defaults(&o);
      o.time_limit = 2;
      eng_plan plan;
      int rc = eng_plan_make(&s.config, q3[i].name, atoi(argv[3]), atoi(argv[4]), &prof, &o, &plan, &e);
      if (rc && rc != ENG_ECAP) {
        fprintf(stderr, "bench_poetx_run: %s %s: %s\n", methods[k], q3[i].name, e.msg);
        return 1;
      }
      double params = q3[i].params; // for bytes per parameter
      eng_plan_cost c; // the training state the planner counts, fitting or not
      if (eng_plan_cost_make(&s.config, atoi(argv[3]), atoi(argv[4]), 1, &prof, &c, &e)) {
        fprintf(stderr, "bench_poetx_run: %s %s: %s\n", methods[k], q3[i].name, e.msg);
        return 1;
      }
      printf("shape %s %s %.0f %.0f %.2f %s\n", methods[k], q3[i].name, params, c.host_state, c.host_state / params,
             rc ? "no" : "fits");
      if (!rc) {
        best = i;
        eng_plan_free(&plan);
      }
    }
    printf("largest %s %s %zu\n", methods[k], best >= 0 ? q3[best].name : "none", avail);
  }
  return 0;
}

int main(int argc, char **argv) {
  int rc = argc > 1 && !strcmp(argv[1], "train")     ? train(argc, argv)
           : argc > 1 && !strcmp(argv[1], "speed")   ? speed(argc, argv)
           : argc > 1 && !strcmp(argv[1], "largest") ? largest(argc, argv)
                                                      : 2;
  if (rc == 2)
    fprintf(stderr, "usage: bench_poetx_run train METHOD BLOCK PRESET STEPS BATCH SEQ DATA\n"
                    "       bench_poetx_run speed BLOCK PRESET STEPS BATCH SEQ DATA METHOD...\n"
                    "       bench_poetx_run largest BLOCK BATCH SEQ PROFILE\n");
  return rc;
}
