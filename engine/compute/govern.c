#include "compute/govern.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *eng_stop_name(eng_stop s) {
  switch (s) {
  case ENG_STOP_TOKENS: return "max_tokens";
  case ENG_STOP_FLOPS: return "max_flops";
  case ENG_STOP_WALL: return "max_wall";
  case ENG_STOP_GAIN: return "marginal_gain";
  case ENG_STOP_GL: return "gl";
  default: return "";
  }
}

static int window_of(const eng_budget *b) { return b->gain_window > 0 ? b->gain_window : 4; }
static int patience_of(const eng_budget *b) { return b->gain_patience > 0 ? b->gain_patience : 3; }

int eng_budget_validate(const eng_budget *b, int has_eval, eng_err *e) {
#define BAD(...) return eng_err_set(e, ENG_EINVAL, "budget." __VA_ARGS__)
  if (b->max_tokens < 0) BAD("max_tokens: must be non-negative (0: no budget), got %lld", (long long)b->max_tokens);
  if (!(b->max_flops >= 0) || !isfinite(b->max_flops)) BAD("max_flops: must be a finite non-negative number of FLOPs");
  if (!(b->max_wall_s >= 0) || !isfinite(b->max_wall_s)) BAD("max_wall_seconds: must be a finite non-negative number of seconds");
  if (!(b->gain_tau >= 0) || !isfinite(b->gain_tau)) BAD("gain_tau: must be a finite non-negative loss per FLOP");
  if (b->gain_patience < 0) BAD("gain_patience: must be positive (0: 3)");
  if (b->gain_window != 0 && b->gain_window < 3) BAD("gain_window: must be at least 3 evaluations (0: 4), got %d",
                                                     b->gain_window);
  if (!(b->gl_alpha >= 0) || !isfinite(b->gl_alpha)) BAD("gl_alpha: must be a finite non-negative percentage");
  if ((b->gain_tau > 0 || b->gl_alpha > 0) && !has_eval)
    BAD("%s: needs held-out loss: give the job eval data and eval_every", b->gain_tau > 0 ? "gain_tau" : "gl_alpha");
#undef BAD
  return 0;
}

void eng_govern_init(eng_govern *g, const eng_budget *b) {
  memset(g, 0, sizeof *g);
  g->b = *b;
  g->gain = g->fit_a = g->fit_b = g->best = g->gl = NAN;
}

void eng_govern_free(eng_govern *g) {
  free(g->evals);
  g->evals = NULL;
  g->n_evals = g->cap_evals = 0;
}

eng_stop eng_govern_step(eng_govern *g, int64_t tokens, int64_t counted, double flops_model, double flops_exec,
                         double wall) {
  eng_tally *t = &g->t;
  t->steps++;
  t->tokens += tokens;
  t->counted += counted;
  t->flops_model += flops_model;
  t->flops_exec += flops_exec;
  t->wall_s += wall;
  const eng_budget *b = &g->b;
  if (b->max_tokens > 0 && t->tokens + tokens > b->max_tokens) g->stop = ENG_STOP_TOKENS;
  else if (b->max_flops > 0 && t->flops_model + flops_model > b->max_flops) g->stop = ENG_STOP_FLOPS;
  else if (b->max_wall_s > 0 && t->wall_s + wall > b->max_wall_s) g->stop = ENG_STOP_WALL;
  return g->stop;
}

void eng_govern_spend(eng_govern *g, double flops_model, double flops_exec) {
  g->t.flops_model += flops_model;
  g->t.flops_exec += flops_exec;
}

// Least squares of loss on ln(FLOPs) over the last w evaluations.
static void fit_log(const eng_eval_point *p, int w, double *a, double *b) {
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (int i = 0; i < w; i++) {
    double x = log(p[i].flops), y = p[i].loss;
    sx += x, sy += y, sxx += x * x, sxy += x * y;
  }
  double var = w * sxx - sx * sx;
  *b = var > 0 ? (w * sxy - sx * sy) / var : 0.0;
  *a = (sy - *b * sx) / w;
}

int eng_govern_eval(eng_govern *g, double loss, eng_err *e) {
  if (g->n_evals == g->cap_evals) {
    int cap = g->cap_evals ? 2 * g->cap_evals : 64;
    eng_eval_point *p = realloc(g->evals, (size_t)cap * sizeof *p);
    if (!p) return eng_err_set(e, ENG_ENOMEM, "cannot keep %d evaluations", cap);
    g->evals = p;
    g->cap_evals = cap;
  }
  eng_eval_point *pt = &g->evals[g->n_evals++];
  *pt = (eng_eval_point){.step = g->t.steps, .tokens = g->t.tokens, .flops = g->t.flops_model, .loss = loss};
  if (!isfinite(loss)) return 0;
  if (!(g->best <= loss)) g->best = loss;
  g->gl = 100.0 * (loss / g->best - 1.0);
  const eng_budget *b = &g->b;
  int w = window_of(b);
  if (g->n_evals >= w && pt->flops > 0) {
    fit_log(g->evals + g->n_evals - w, w, &g->fit_a, &g->fit_b);
    g->gain = -g->fit_b / pt->flops;
    g->below = g->gain < b->gain_tau ? g->below + 1 : 0;
  }
  if (b->gain_tau > 0 && g->below >= patience_of(b)) g->stop = ENG_STOP_GAIN;
  else if (b->gl_alpha > 0 && g->gl > b->gl_alpha) g->stop = ENG_STOP_GL;
  return 0;
}

// The packed state: a header of the tally and rule state, then the
// evaluations. Little-endian hosts only, as every checkpoint shard.
typedef struct packed_head {
  uint64_t magic;
  int64_t steps, tokens, counted;
  double flops_model, flops_exec, wall_s;
  int64_t n_evals, below;
  double gain, fit_a, fit_b, best, gl;
  int64_t stop;
} packed_head;
#define GOVERN_MAGIC 0x31766f672d646e74ull // "tnd-gov1"

int eng_govern_pack(const eng_govern *g, void **out, size_t *n, eng_err *e) {
  size_t bytes = sizeof(packed_head) + (size_t)g->n_evals * sizeof(eng_eval_point);
  unsigned char *p = malloc(bytes);
  if (!p) return eng_err_set(e, ENG_ENOMEM, "cannot allocate %zu bytes for the compute tally", bytes);
  packed_head h = {GOVERN_MAGIC, g->t.steps, g->t.tokens, g->t.counted, g->t.flops_model, g->t.flops_exec,
                   g->t.wall_s, g->n_evals, g->below, g->gain, g->fit_a, g->fit_b, g->best, g->gl, g->stop};
  memcpy(p, &h, sizeof h);
  if (g->n_evals) memcpy(p + sizeof h, g->evals, (size_t)g->n_evals * sizeof(eng_eval_point));
  *out = p;
  *n = bytes;
  return 0;
}

int eng_govern_unpack(eng_govern *g, const void *data, size_t n, eng_err *e) {
  packed_head h;
  if (n < sizeof h) return eng_err_set(e, ENG_EINVAL, "the compute tally has %zu bytes, fewer than its header", n);
  memcpy(&h, data, sizeof h);
  if (h.magic != GOVERN_MAGIC || h.n_evals < 0 || h.n_evals > INT32_MAX / 2 ||
      n != sizeof h + (size_t)h.n_evals * sizeof(eng_eval_point) || h.stop < ENG_STOP_NONE || h.stop > ENG_STOP_GL)
    return eng_err_set(e, ENG_EINVAL, "the compute tally is corrupt (%zu bytes)", n);
  eng_eval_point *ev = NULL;
  if (h.n_evals && !(ev = malloc((size_t)h.n_evals * sizeof *ev)))
    return eng_err_set(e, ENG_ENOMEM, "cannot keep %lld evaluations", (long long)h.n_evals);
  if (h.n_evals) memcpy(ev, (const unsigned char *)data + sizeof h, (size_t)h.n_evals * sizeof *ev);
  free(g->evals);
  g->evals = ev;
  g->n_evals = g->cap_evals = (int)h.n_evals;
  g->t = (eng_tally){h.steps, h.tokens, h.counted, h.flops_model, h.flops_exec, h.wall_s};
  g->below = (int)h.below;
  g->gain = h.gain, g->fit_a = h.fit_a, g->fit_b = h.fit_b, g->best = h.best, g->gl = h.gl;
  g->stop = (eng_stop)h.stop;
  return 0;
}
