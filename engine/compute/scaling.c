#include "compute/scaling.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/layout.h"

const eng_scaling_fit eng_scaling_chinchilla = {.E = 1.6934, .A = 406.4, .B = 410.7, .alpha = 0.3392, .beta = 0.2849};
const eng_scaling_fit eng_scaling_besiroglu = {.E = 1.8172, .A = 482.01, .B = 2085.43, .alpha = 0.3478, .beta = 0.3658};

int eng_scaling_parse(const char *s, eng_scaling_fit *f, eng_err *e) {
  if (!strcmp(s, "chinchilla")) *f = eng_scaling_chinchilla;
  else if (!strcmp(s, "besiroglu")) *f = eng_scaling_besiroglu;
  else {
    char tail;
    if (sscanf(s, "%lf,%lf,%lf,%lf,%lf%c", &f->E, &f->A, &f->B, &f->alpha, &f->beta, &tail) != 5)
      return eng_err_set(e, ENG_EINVAL, "fit: \"%s\" is neither chinchilla, besiroglu nor E,A,B,alpha,beta", s);
  }
  return eng_scaling_validate(f, e);
}

int eng_scaling_validate(const eng_scaling_fit *f, eng_err *e) {
  if (!(f->E >= 0) || !isfinite(f->E)) return eng_err_set(e, ENG_EINVAL, "fit.E: must be finite and non-negative");
  const double v[4] = {f->A, f->B, f->alpha, f->beta};
  static const char *const names[4] = {"A", "B", "alpha", "beta"};
  for (int i = 0; i < 4; i++)
    if (!(v[i] > 0) || !isfinite(v[i]))
      return eng_err_set(e, ENG_EINVAL, "fit.%s: must be finite and positive (got %g)", names[i], v[i]);
  return 0;
}

double eng_scaling_loss(const eng_scaling_fit *f, double N, double D) {
  return f->E + f->A / pow(N, f->alpha) + f->B / pow(D, f->beta);
}

void eng_scaling_optimal(const eng_scaling_fit *f, double C, double *N, double *D) {
  const double s = f->alpha + f->beta;
  const double G = pow(f->alpha * f->A / (f->beta * f->B), 1.0 / s);
  *N = G * pow(C / 6.0, f->beta / s);
  *D = C / (6.0 * *N);
}

int eng_scaling_advise(const eng_scaling_fit *f, double N, double D, char *msg, size_t n) {
  double C = 6.0 * N * D, No, Do;
  eng_scaling_optimal(f, C, &No, &Do);
  double r = (D / N) / (Do / No);
  if (r <= 4.0 && r >= 0.25) return 0;
  snprintf(msg, n, "%.3g parameters on %.3g tokens is %.3g tokens per parameter, %.1fx %s than compute-optimal: for its "
           "%.3g FLOPs the scaling-law fit puts the optimum at %.3g parameters and %.3g tokens (%.3g per parameter), "
           "predicted loss %.4f there against %.4f here", N, D, D / N, r > 1 ? r : 1 / r, r > 1 ? "more" : "fewer", C,
           No, Do, Do / No, eng_scaling_loss(f, No, Do), eng_scaling_loss(f, N, D));
  return 1;
}

static eng_config qwen3_config(int vocab, int d, int L, int ff, int heads, int kv, int hd, int tie) {
  eng_config c = {.vocab = vocab, .d_model = d, .n_layers = L, .n_heads = heads, .n_kv_heads = kv, .head_dim = hd,
                  .d_ff = ff, .max_pos = 40960, .rope_theta = 1000000.0f, .rms_eps = 1e-6f, .init_std = 0.02f,
                  .tie_embeddings = tie};
  eng_arch_apply(&c, ENG_ARCH_QWEN3);
  return c;
}

static double params_of(const eng_config *c) {
  eng_layout lo;
  eng_layout_init(&lo, c);
  return (double)lo.total_numel;
}

// The published dense shapes (their config.json): name, hidden, layers,
// MLP, heads, KV heads, tied.
static const struct {
  const char *name;
  int d, L, ff, H, KV, tie;
} published[] = {{"Qwen3-0.6B", 1024, 28, 3072, 16, 8, 1}, {"Qwen3-1.7B", 2048, 28, 6144, 16, 8, 1},
                 {"Qwen3-4B", 2560, 36, 9728, 32, 8, 1},   {"Qwen3-8B", 4096, 36, 12288, 32, 8, 0},
                 {"Qwen3-14B", 5120, 40, 17408, 40, 8, 0}, {"Qwen3-32B", 5120, 64, 25600, 64, 8, 0}};
enum { N_PUBLISHED = sizeof published / sizeof published[0] };

int eng_qwen3_published(eng_qwen3_shape *out, int max, int vocab) {
  int n = 0;
  for (int i = 0; i < N_PUBLISHED && n < max; i++, n++) {
    snprintf(out[n].name, sizeof out[n].name, "%s", published[i].name);
    out[n].config = qwen3_config(vocab, published[i].d, published[i].L, published[i].ff, published[i].H,
                                 published[i].KV, 128, published[i].tie);
    out[n].params = params_of(&out[n].config);
  }
  return n;
}

typedef struct cand {
  eng_qwen3_shape s;
  double dist;
} cand;

static int by_dist(const void *a, const void *b) {
  double x = ((const cand *)a)->dist, y = ((const cand *)b)->dist;
  return x < y ? -1 : x > y;
}

int eng_qwen3_nearest(double N, int vocab, eng_qwen3_shape *out, int max) {
  enum { D_MAX = 8192, STEP = 128 };
  int cap = N_PUBLISHED + (D_MAX / STEP) * (D_MAX / 32);
  cand *c = malloc((size_t)cap * sizeof *c);
  if (!c) return 0;
  int n = 0;
  eng_qwen3_shape pub[N_PUBLISHED];
  int np = eng_qwen3_published(pub, N_PUBLISHED, vocab);
  for (int i = 0; i < np; i++) c[n++] = (cand){pub[i], fabs(log(pub[i].params / N))};
  for (int d = 2 * STEP; d <= D_MAX; d += STEP) {
    // Query heads of 128 covering the hidden size in multiples of 8 with 8
    // KV heads, as Qwen3 has them (its 4B: hidden 2560, 32 heads); below
    // 1024, heads of 64 in pairs sharing a KV head.
    int hd = d >= 1024 ? 128 : 64, heads, kv;
    if (hd == 128) heads = (d / hd + 7) / 8 * 8, kv = 8;
    else heads = (d / hd + 1) / 2 * 2, kv = heads / 2;
    int ff = 3 * d, tie = d <= 2560;
    for (int L = d / 128 > 2 ? d / 128 : 2; L <= d / 32; L++) {
      cand *k = &c[n++];
      k->s.config = qwen3_config(vocab, d, L, ff, heads, kv, hd, tie);
      k->s.params = params_of(&k->s.config);
      snprintf(k->s.name, sizeof k->s.name, "qwen3 d%d L%d", d, L);
      k->dist = fabs(log(k->s.params / N));
    }
  }
  qsort(c, (size_t)n, sizeof *c, by_dist);
  int m = n < max ? n : max;
  for (int i = 0; i < m; i++) out[i] = c[i].s;
  free(c);
  return m;
}
