// The measurements behind two choices of the 8-bit AdamW state: the absmax
// block size (ENG_ADAMW8_BLOCK; numbers quoted in engine/optim/adamw8.c) and
// storing sqrt(v) rather than v (quoted in engine/optim/adamw8.h).
//   bench_optim_block [rows] [cols] [steps] [column sigma]
// trains the moments of one [rows, cols] weight on synthetic gradients with
// the structure of a transformer weight's: a log-normal scale per row (sigma
// 0.5) and per column (sigma as given, default 1: outlier features), a
// persistent per-element mean under per-step noise. Runs, from the same
// weights and gradients: fp32 state (the reference), the 8-bit pass at blocks
// 256 and 2048, and, for comparison, 8-bit state that stores v itself (block
// 256; written here, scalar). Prints per 8-bit run the relative RMS error of
// each step's update Δw against the fp32 run's (mean over the second half of
// the steps) and its cosine; and the error of quantizing the fp32 run's final
// moments directly: relative RMS of m and of sqrt(v), and the share of
// nonzero v that become 0.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim/adamw8.h"
#include "optim/q8map.h"

static uint64_t rng = 0x853c49e6748fea9bull;

static double urand(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return ((double)(rng >> 11) + 0.5) / 9007199254740992.0;
}

// Approximately normal (sum of 4 uniforms, scaled to unit variance): cheap,
// and the tails come from the log-normal scales anyway.
static double nrand(void) { return (urand() + urand() + urand() + urand() - 2.0) * 1.7320508; }

static void *xalloc(size_t bytes) {
  void *p = calloc(1, bytes);
  if (!p) {
    fprintf(stderr, "bench_optim_block: out of memory\n");
    exit(1);
  }
  return p;
}

// The comparison: 8-bit state holding v itself, block 256, same arithmetic.
typedef struct {
  uint8_t *mq, *vq;
  float *ms, *vs;
} vstate;

static void vstate_step(vstate *s, float *w, const float *g, size_t n, const eng_adamw8_hparams *h) {
  enum { B = 256 };
  const eng_q8map *qm = eng_q8_signed(), *qv = eng_q8_unsigned();
  const double bc1 = 1.0 - pow((double)h->beta1, (double)h->t), bc2 = 1.0 - pow((double)h->beta2, (double)h->t);
  const float step = (float)(h->lr / bc1), bc2s = (float)sqrt(bc2), a1 = 1.0f - h->beta1, a2 = 1.0f - h->beta2;
  float mb[B], vb[B];
  for (size_t i0 = 0; i0 < n; i0 += B) {
    size_t len = n - i0 < B ? n - i0 : B, b = i0 / B;
    for (size_t j = 0; j < len; j++) {
      size_t i = i0 + j;
      float m = qm->value[s->mq[i]] * s->ms[b], v = qv->value[s->vq[i]] * s->vs[b];
      float gi = g[i] * h->clip_scale;
      mb[j] = m + (gi - m) * a1;
      vb[j] = v * h->beta2 + a2 * (gi * gi);
      w[i] = w[i] - step * (mb[j] / (sqrtf(vb[j]) / bc2s + h->eps));
    }
    s->ms[b] = eng_q8_quantize_block(qm, s->mq + i0, mb, len);
    s->vs[b] = eng_q8_quantize_block(qv, s->vq + i0, vb, len);
  }
}

int main(int argc, char **argv) {
  const size_t rows = argc > 1 ? strtoull(argv[1], NULL, 10) : 512;
  const size_t cols = argc > 2 ? strtoull(argv[2], NULL, 10) : 4096;
  const int steps = argc > 3 ? atoi(argv[3]) : 200;
  const double csigma = argc > 4 ? atof(argv[4]) : 1.0;
  const size_t n = rows * cols;
  enum { RUNS = 4 };
  const char *name[RUNS] = {"fp32 state", "block 256", "block 2048", "v stored, block 256"};
  const int blocks[RUNS] = {256, 256, 2048, 256};
  float *rs = xalloc(rows * 4), *cs = xalloc(cols * 4), *mu = xalloc(n * 4), *g = xalloc(n * 4);
  for (size_t r = 0; r < rows; r++) rs[r] = (float)exp(0.5 * nrand());
  for (size_t c = 0; c < cols; c++) cs[c] = (float)exp(csigma * nrand());
  for (size_t i = 0; i < n; i++) mu[i] = (float)(0.3 * nrand());
  float *w[RUNS], *w0[RUNS];
  eng_adamw8_state s[RUNS - 1];
  vstate vs = {xalloc(n), xalloc(n), xalloc(n / 256 * 4 + 4), xalloc(n / 256 * 4 + 4)};
  eng_err e = {0};
  for (int k = 0; k < RUNS; k++) {
    w[k] = xalloc(n * 4), w0[k] = xalloc(n * 4);
    if (k == RUNS - 1) break;
    eng_adamw8_opts o = {.block = blocks[k], .fp32_state = k == 0};
    if (eng_adamw8_state_init(&s[k], n, &o, NULL, &e)) {
      fprintf(stderr, "bench_optim_block: %s\n", e.msg);
      return 1;
    }
  }
  double err[RUNS] = {0}, cosine[RUNS] = {0};
  int counted = 0;
  for (int t = 1; t <= steps; t++) {
    for (size_t r = 0; r < rows; r++)
      for (size_t c = 0; c < cols; c++) {
        size_t i = r * cols + c;
        g[i] = (float)(1e-3 * rs[r] * cs[c] * (mu[i] + nrand()));
      }
    eng_adamw8_hparams h = {.lr = 1e-3f, .wd = 0.0f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                            .clip_scale = 1.0f, .t = t};
    for (int k = 0; k < RUNS; k++) {
      memcpy(w0[k], w[k], n * 4);
      if (k == RUNS - 1) {
        vstate_step(&vs, w[k], g, n, &h);
        continue;
      }
      eng_adamw8_io io = {w[k], g, ENG_ADAMW8_F32, NULL, ENG_ADAMW8_F32, NULL, 0};
      if (eng_adamw8_update(&s[k], &io, &h, ENG_ISA_AUTO, NULL, &e)) {
        fprintf(stderr, "bench_optim_block: %s\n", e.msg);
        return 1;
      }
    }
    if (t <= steps / 2) continue;
    counted++;
    double ref2 = 0;
    for (size_t i = 0; i < n; i++) {
      double d = (double)w[0][i] - w0[0][i];
      ref2 += d * d;
    }
    for (int k = 1; k < RUNS; k++) {
      double e2 = 0, dot = 0, q2 = 0;
      for (size_t i = 0; i < n; i++) {
        double d0 = (double)w[0][i] - w0[0][i], d = (double)w[k][i] - w0[k][i];
        e2 += (d - d0) * (d - d0), dot += d * d0, q2 += d * d;
      }
      err[k] += sqrt(e2 / ref2);
      cosine[k] += dot / sqrt(q2 * ref2);
    }
  }
  printf("matrix %zu x %zu, column sigma %.2f, %d steps; update error: mean over the last %d\n", rows, cols,
         csigma, steps, counted);
  // Direct quantization of the fp32 run's final moments: m, and v as each
  // variant stores it (its root, or itself).
  const eng_q8map *qm = eng_q8_signed(), *qv = eng_q8_unsigned();
  uint8_t *codes = xalloc(ENG_ADAMW8_BLOCK_MAX);
  float *x = xalloc(ENG_ADAMW8_BLOCK_MAX * 4), *back = xalloc(ENG_ADAMW8_BLOCK_MAX * 4);
  for (int k = 1; k < RUNS; k++) {
    const size_t B = (size_t)blocks[k];
    const int root = k != RUNS - 1;
    double em = 0, nm = 0, ev = 0, nv = 0;
    size_t zeros = 0, nonzero = 0;
    for (size_t i0 = 0; i0 < n; i0 += B) {
      size_t len = n - i0 < B ? n - i0 : B;
      float a = eng_q8_quantize_block(qm, codes, s[0].m + i0, len);
      eng_q8_dequantize_block(qm, back, codes, len, a);
      for (size_t j = 0; j < len; j++) {
        double d = back[j] - (double)s[0].m[i0 + j];
        em += d * d, nm += (double)s[0].m[i0 + j] * s[0].m[i0 + j];
      }
      for (size_t j = 0; j < len; j++) x[j] = root ? sqrtf(s[0].v[i0 + j]) : s[0].v[i0 + j];
      a = eng_q8_quantize_block(qv, codes, x, len);
      eng_q8_dequantize_block(qv, back, codes, len, a);
      for (size_t j = 0; j < len; j++) {
        double want = sqrt((double)s[0].v[i0 + j]), got = root ? back[j] : sqrt((double)back[j]);
        ev += (got - want) * (got - want), nv += want * want;
        nonzero += s[0].v[i0 + j] > 0;
        zeros += s[0].v[i0 + j] > 0 && back[j] == 0;
      }
    }
    printf("%-20s update rel. RMS error %.4f (cosine %.5f); quantization rel. RMS error m %.4f, sqrt(v) %.4f; "
           "nonzero v -> 0: %.2e\n",
           name[k], err[k] / counted, cosine[k] / counted, sqrt(em / nm), sqrt(ev / nv),
           (double)zeros / (double)nonzero);
  }
  for (int k = 0; k < RUNS; k++) free(w[k]), free(w0[k]);
  for (int k = 0; k < RUNS - 1; k++) eng_adamw8_state_free(&s[k]);
  free(vs.mq), free(vs.vq), free(vs.ms), free(vs.vs);
  free(rs), free(cs), free(mu), free(g), free(codes), free(x), free(back);
  return 0;
}
