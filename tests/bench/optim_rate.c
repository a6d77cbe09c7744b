// Rates for tests/bench/optim.sh, with the threads OpenMP is given:
//   bench_optim_rate adamw8 [params] [tensors] [reps] [block]
//     the fused 8-bit AdamW pass over `tensors` tensors of params/tensors
//     each (bf16 gradients, bf16 working copy), one warm-up step, then
//     `reps` steps; prints "adamw8_params_per_s <median>", the bytes per
//     parameter the pass must read and write, and the state bytes per
//     parameter as allocated.
//   bench_optim_rate triad [floats] [reps]
//     a[i] = b[i] + s * c[i] over three arrays of `floats` floats each
//     (default 2^27: 1.5 GiB in all, past any cache); prints "triad_gbs
//     <median>" counting 12 bytes per element, STREAM's convention.
//   bench_optim_rate rmw [floats] [reps]
//     for scale: the memory traffic of an fp32 Adam step with trivial
//     arithmetic (read p, g, m, v; write p, m, v: 28 bytes per element) over
//     four such arrays; prints "rmw_gbs <median>". Streams that are read
//     before they are written need no read-for-ownership, so this moves
//     more bytes per second than the triad does.
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/bf16.h"
#include "optim/adamw8.h"

#include "bench.h"

static void *big(size_t bytes) {
  void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
  if (!p) {
    fprintf(stderr, "bench_optim_rate: out of memory (%zu bytes)\n", bytes);
    exit(1);
  }
  return p;
}

static int adamw8(size_t params, int tensors, int reps, int block) {
  size_t per = params / (size_t)tensors;
  eng_adamw8_opts o = {.block = block};
  eng_adamw8_state *s = calloc((size_t)tensors, sizeof *s);
  float **w = calloc((size_t)tensors, sizeof *w);
  uint16_t **g = calloc((size_t)tensors, sizeof *g), **work = calloc((size_t)tensors, sizeof *work);
  double *rate = calloc((size_t)reps, sizeof *rate);
  size_t state_bytes = 0;
  eng_err e = {0};
  for (int t = 0; t < tensors; t++) {
    if (eng_adamw8_state_init(&s[t], per, &o, NULL, &e)) {
      fprintf(stderr, "bench_optim_rate: %s\n", e.msg);
      return 1;
    }
    state_bytes += s[t].bytes;
    w[t] = big(per * sizeof(float));
    g[t] = big(per * sizeof(uint16_t));
    work[t] = big(per * sizeof(uint16_t));
    // Gradients of a few magnitudes, first-touched by the threads that update them.
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < per; i++) {
      uint32_t h = (uint32_t)(i * 2654435761u);
      w[t][i] = (float)(h >> 8) * 0x1p-30f - 0.0078125f;
      g[t][i] = eng_bf16_from_f32((float)((int32_t)h) * 0x1p-40f * (float)(1 + (h >> 29)));
      work[t][i] = 0;
    }
  }
  eng_adamw8_hparams h = {.lr = 1e-4f, .wd = 0.1f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .clip_scale = 0.5f};
  for (int r = -1; r < reps; r++) {
    h.t = r + 2;
    double t0 = eng_now();
    for (int t = 0; t < tensors; t++) {
      eng_adamw8_io io = {w[t], g[t], ENG_ADAMW8_BF16, work[t], ENG_ADAMW8_BF16, NULL, 0};
      if (eng_adamw8_update(&s[t], &io, &h, ENG_ISA_AUTO, NULL, &e)) {
        fprintf(stderr, "bench_optim_rate: %s\n", e.msg);
        return 1;
      }
    }
    if (r >= 0) rate[r] = (double)per * tensors / (eng_now() - t0);
  }
  const double blk = s[0].quantized ? 2.0 * sizeof(float) / (double)s[0].block : 0.0;
  printf("adamw8_threads %d\n", omp_get_max_threads());
  printf("adamw8_isa %s\n", eng_isa_name(eng_isa_resolve(ENG_ISA_AUTO)));
  printf("adamw8_params %zu\n", per * (size_t)tensors);
  // Read g (bf16), m and v codes, w, both absmaxes; write the same state, w
  // and the bf16 working copy.
  printf("adamw8_bytes_read %.4f\n", 2 + 1 + 1 + 4 + blk);
  printf("adamw8_bytes_written %.4f\n", 1 + 1 + 4 + 2 + blk);
  printf("adamw8_bytes_per_param %.4f\n", 16 + 2 * blk);
  printf("adamw8_state_bytes_per_param %.4f\n", (double)state_bytes / (double)(per * (size_t)tensors));
  printf("adamw8_params_per_s %.4g\n", bench_median(rate, reps));
  for (int t = 0; t < tensors; t++) {
    eng_adamw8_state_free(&s[t]);
    free(w[t]), free(g[t]), free(work[t]);
  }
  free(s), free(w), free(g), free(work), free(rate);
  return 0;
}

static int triad(size_t n, int reps) {
  float *a = big(n * sizeof(float)), *b = big(n * sizeof(float)), *c = big(n * sizeof(float));
  double *gbs = calloc((size_t)reps, sizeof *gbs);
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) a[i] = 0.0f, b[i] = 1.0f, c[i] = 2.0f;
  const float s = 3.0f;
  for (int r = -1; r < reps; r++) {
    double t0 = eng_now();
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) a[i] = b[i] + s * c[i];
    if (r >= 0) gbs[r] = 12.0 * (double)n / (eng_now() - t0) / 1e9;
  }
  printf("triad_threads %d\n", omp_get_max_threads());
  printf("triad_bytes %zu\n", 3 * n * sizeof(float));
  printf("triad_gbs %.2f\n", bench_median(gbs, reps));
  int bad = a[n / 2] != 7.0f;
  free(a), free(b), free(c), free(gbs);
  return bad;
}

static int rmw(size_t n, int reps) {
  float *p = big(n * sizeof(float)), *g = big(n * sizeof(float)), *m = big(n * sizeof(float)),
        *v = big(n * sizeof(float));
  double *gbs = calloc((size_t)reps, sizeof *gbs);
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) p[i] = 1.0f, g[i] = 1e-3f, m[i] = 0.0f, v[i] = 0.0f;
  for (int r = -1; r < reps; r++) {
    double t0 = eng_now();
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
      m[i] = m[i] * 0.9f + g[i];
      v[i] = v[i] * 0.999f + g[i] * g[i];
      p[i] = p[i] - 1e-3f * m[i];
    }
    if (r >= 0) gbs[r] = 28.0 * (double)n / (eng_now() - t0) / 1e9;
  }
  printf("rmw_gbs %.2f\n", bench_median(gbs, reps));
  int bad = !(p[n / 2] < 1.0f);
  free(p), free(g), free(m), free(v), free(gbs);
  return bad;
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "adamw8") == 0)
    return adamw8(argc > 2 ? strtoull(argv[2], NULL, 10) : (size_t)1 << 27, argc > 3 ? atoi(argv[3]) : 8,
                  argc > 4 ? atoi(argv[4]) : 7, argc > 5 ? atoi(argv[5]) : 0);
  if (argc >= 2 && strcmp(argv[1], "triad") == 0)
    return triad(argc > 2 ? strtoull(argv[2], NULL, 10) : (size_t)1 << 27, argc > 3 ? atoi(argv[3]) : 7);
  if (argc >= 2 && strcmp(argv[1], "rmw") == 0)
    return rmw(argc > 2 ? strtoull(argv[2], NULL, 10) : (size_t)1 << 27, argc > 3 ? atoi(argv[3]) : 7);
  fprintf(stderr, "usage: %s adamw8 [params] [tensors] [reps] [block] | triad|rmw [floats] [reps]\n", argv[0]);
  return 2;
}
