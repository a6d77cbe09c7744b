// The simulator's replay of one steady-state step (plan/sim.h).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/sim.h"

enum { L_H2D, L_D2H, L_NVW, L_NVR, L_OPT, L_N };

typedef struct replay {
  const eng_plan *p;
  const eng_plan_cost *k;
  eng_plan_sim *s;
  double lane[L_N];  // when each link (and the optimizer thread) is free
  int cap_span;
  int oom;
} replay;

static void span(replay *r, eng_span_lane lane, double t0, double t1, const char *fmt, int v) {
  eng_plan_sim *s = r->s;
  if (s->n_span == r->cap_span) {
    int cap = r->cap_span ? 2 * r->cap_span : 256;
    eng_plan_span *n = realloc(s->span, (size_t)cap * sizeof *n);
    if (!n) {
      r->oom = 1;
      return;
    }
    s->span = n;
    r->cap_span = cap;
  }
  eng_plan_span *x = &s->span[s->n_span++];
  x->lane = lane;
  x->t0 = t0;
  x->t1 = t1;
  snprintf(x->what, sizeof x->what, fmt, v);
}

static const eng_span_lane shown[L_N] = {ENG_SPAN_H2D, ENG_SPAN_D2H, ENG_SPAN_NVME, ENG_SPAN_NVME, ENG_SPAN_OPT};

// A task on a first-in-first-out lane: starts when issued, ready and the
// lane is free; returns its end.
static double run(replay *r, int lane, double issue, double ready, double secs, const char *fmt, int v) {
  double t0 = fmax(fmax(issue, ready), r->lane[lane]);
  r->lane[lane] = t0 + secs;
  span(r, shown[lane], t0, t0 + secs, fmt, v);
  return t0 + secs;
}

typedef struct entry {
  char kind;  // 'F', 'H', 'R', 'B'
  int layer;
  int win;
} entry;

static int by_window(const void *a, const void *b) {
  const eng_plan_xfer *x = *(const eng_plan_xfer *const *)a, *y = *(const eng_plan_xfer *const *)b;
  if (x->window != y->window) return x->window < y->window ? -1 : 1;
  return x < y ? -1 : x > y; // keep the plan's order within a window
}

static double opt_secs(const eng_plan_cost *k, int e) {
  return e < k->L ? k->t_opt_layer : k->t_opt_head;
}

int eng_plan_simulate(const eng_plan *p, const eng_plan_cost *k, eng_plan_sim *s, eng_err *e) {
  const int L = p->n_layers, W = 2 * L + 1;
  memset(s, 0, sizeof *s);
  if (L != k->L) return eng_err_set(e, ENG_EINVAL, "plan simulate: the plan has %d layers, the cost %d", L, k->L);
  // Compute entries in the executor's order.
  int cap = 2 * L + 1 + L * (p->max_block > 0 ? p->max_block : L);
  entry *en = malloc((size_t)cap * sizeof *en);
  const eng_plan_xfer **xs = malloc(((size_t)p->n_xfer + 1) * sizeof *xs);
  double *occ = malloc(3 * (size_t)W * sizeof *occ);
  s->win_start = calloc((size_t)W, sizeof *s->win_start);
  s->win_end = calloc((size_t)W, sizeof *s->win_end);
  double *end = malloc((size_t)cap * sizeof *end);
  double *gout = malloc(((size_t)L + 2) * sizeof *gout);
  if (!en || !xs || !occ || !s->win_start || !s->win_end || !end || !gout) {
    free(en), free(xs), free(occ), free(end), free(gout);
    eng_plan_sim_free(s);
    return eng_err_set(e, ENG_ENOMEM, "plan simulate: out of memory");
  }
  s->n_win = W;
  int n = 0;
  for (int l = 0; l < L; l++) en[n++] = (entry){'F', l, l};
  en[n++] = (entry){'H', -1, L};
  for (int w = L + 1; w < W; w++) {
    int j = 2 * L - w;
    for (int l = p->win[w].recompute_from; l < j; l++) en[n++] = (entry){'R', l, w};
    en[n++] = (entry){'B', j, w};
  }
  for (int t = 0; t < p->n_xfer; t++) xs[t] = &p->xfer[t];
  qsort(xs, (size_t)p->n_xfer, sizeof *xs, by_window);

  replay r = {p, k, s, {0}, 0, 0};
  const double bw[ENG_LANE_COUNT] = {k->h2d, k->d2h, k->nvme_write, k->nvme_read};
  const int lane_of[ENG_LANE_COUNT] = {L_H2D, L_D2H, L_NVW, L_NVR};
  // The previous step's last gradients and dX of boundary 0 land; then the
  // optimizer, embedding first (its update lets boundary 0 be gathered).
  double tg = run(&r, L_D2H, 0, 0, (k->g_layer + k->bnd) / k->d2h, "g%d", 0);
  double opt_done[ENG_PLAN_MAX_LAYERS + 2];
  double thread = tg; // the compute thread
  double emb;
  const int inl = k->opt_inline && k->ranks <= 1; // updates between the forward's entries
  if (k->ranks > 1) {
    // The sum over the ranks, every update of this rank's parts, the gather
    // of the parts: all before the forward (engine/dist_run.c).
    double t = tg + k->t_reduce, u = t + k->t_opt_embed + L * k->t_opt_layer + k->t_opt_head;
    span(&r, ENG_SPAN_COMM, tg, t, "sum", 0);
    span(&r, ENG_SPAN_OPT, t, u, "opt", 0);
    emb = thread = u + k->t_gather;
    span(&r, ENG_SPAN_COMM, u, emb, "gather", 0);
    for (int q = 0; q <= L; q++) opt_done[q] = emb;
    s->t_comm = k->t_reduce + k->t_gather;
  } else if (k->opt_inline) {
    emb = thread += k->t_opt_embed;
    span(&r, ENG_SPAN_OPT, tg, emb, "opt", 0);
  } else {
    emb = run(&r, L_OPT, tg, 0, k->t_opt_embed, "opt", 0);
    for (int q = 0; q <= L; q++) opt_done[q] = run(&r, L_OPT, 0, 0, opt_secs(k, q), "opt", q);
  }
  double b0 = run(&r, L_H2D, emb, 0, k->bnd / k->h2d, "b%d", 0);
  if (inl) { // layers 0 and 1 (or the head) before F_0
    double t1 = thread + opt_secs(k, 0), t2 = t1 + opt_secs(k, 1);
    span(&r, ENG_SPAN_OPT, thread, t2, "opt", 1);
    opt_done[0] = t1;
    opt_done[1] = t2;
    thread = t2;
  }

  double *wend = malloc((size_t)(n + 1) * sizeof *wend);
  if (!wend) {
    free(en), free(xs), free(occ), free(end), free(gout);
    eng_plan_sim_free(s);
    return eng_err_set(e, ENG_ENOMEM, "plan simulate: out of memory");
  }
  // Weight copies of entries 0 and 1 are issued at the start of the step.
  for (int q = 0; q < 2 && q < n; q++) {
    int fwd = en[q].kind == 'F' || en[q].kind == 'H';
    double bytes = en[q].kind == 'H' ? k->w_head : k->w_layer;
    wend[q] = run(&r, L_H2D, 0, fwd ? opt_done[en[q].kind == 'H' ? L : en[q].layer] : 0, bytes / k->h2d, "w%d",
                  en[q].layer);
  }
  int xi = 0, wx0 = 0, gi = 0, win = -1;
  double barrier = 0, win_xfer_end = 0, busy = 0, rec = 0;
  for (int q = 0; q < n; q++) {
    const entry *x = &en[q];
    // The slot of entry q-1 frees at its end: the copy of entry q+1 goes then.
    if (q >= 1 && q + 1 < n) {
      const entry *y = &en[q + 1];
      int fwd = y->kind == 'F' || y->kind == 'H';
      if (inl && x->kind == 'F' && x->layer >= 1) { // the update of entry q+1 runs first
        double t0 = fmax(thread, end[q - 1]);
        thread = t0 + opt_secs(k, q + 1);
        opt_done[q + 1] = thread;
        span(&r, ENG_SPAN_OPT, t0, thread, "opt", q + 1);
      }
      double bytes = y->kind == 'H' ? k->w_head : k->w_layer;
      wend[q + 1] = run(&r, L_H2D, end[q - 1], fwd ? opt_done[y->kind == 'H' ? L : y->layer] : 0,
                        bytes / k->h2d, "w%d", y->layer);
    }
    double start = fmax(q ? end[q - 1] : b0, wend[q]);
    if (k->opt_inline) start = fmax(start, thread);
    if (x->kind == 'H' || x->kind == 'B') { // a gradient slot: the one used two before is out
      if (gi >= 2) start = fmax(start, gout[gi - 2]);
    }
    if (x->win != win) { // a new window: the previous one's transfers are done
      if (win >= 0) {
        s->win_end[win] = fmax(end[q - 1], win_xfer_end);
        barrier = s->win_end[win];
      }
      start = fmax(start, barrier);
      win = x->win;
      s->win_start[win] = start;
      win_xfer_end = start;
      for (wx0 = xi; xi < p->n_xfer && xs[xi]->window == win; xi++) {
        const eng_plan_xfer *t = xs[xi];
        if (t->lane == ENG_LANE_H2D && x->kind != 'H') continue; // with the backward entry, below
        double done = run(&r, lane_of[t->lane], start, 0, (double)t->bytes / bw[t->lane], "b%d", t->boundary);
        win_xfer_end = fmax(win_xfer_end, done);
      }
    }
    // A backward window's copy-ins start with its backward entry, after the
    // recompute's weights (plan.h).
    if (x->kind == 'B')
      for (int t = wx0; t < xi; t++)
        if (xs[t]->lane == ENG_LANE_H2D) {
          double done = run(&r, L_H2D, start, 0, (double)xs[t]->bytes / k->h2d, "b%d", xs[t]->boundary);
          win_xfer_end = fmax(win_xfer_end, done);
        }
    double dur = x->kind == 'F' || x->kind == 'R' ? k->t_fwd
               : x->kind == 'H' ? k->t_head
                                : k->t_bwd + (p->keep_inner[x->layer] ? 0.0 : k->t_refwd);
    end[q] = start + dur;
    if (k->opt_inline) thread = end[q];
    busy += dur;
    if (x->kind == 'R') rec += dur;
    if (x->kind == 'B' && !p->keep_inner[x->layer]) rec += k->t_refwd;
    span(&r, ENG_SPAN_COMPUTE, start, end[q], x->kind == 'F' ? "F%d" : x->kind == 'H' ? "H" : x->kind == 'R' ? "R%d" : "B%d",
         x->layer);
    if (x->kind == 'H' || x->kind == 'B') {
      double bytes = x->kind == 'H' ? k->g_head : k->g_layer;
      // B_0's gradients land in the next step (its first task above).
      gout[gi] = x->kind == 'B' && x->layer == 0 ? end[q] : run(&r, L_D2H, end[q], 0, bytes / k->d2h, "g%d", x->layer);
      gi++;
    }
  }
  s->win_end[win] = fmax(end[n - 1], win_xfer_end);
  double last = end[n - 1];
  for (int l = 0; l < L_N; l++)
    if (l != L_OPT) last = fmax(last, r.lane[l]);
  s->step_time = last;
  s->t_compute = busy;
  s->t_recompute = rec;
  s->t_exposed = last - busy;
  int rc = eng_plan_occupancy(p, k, occ, occ + W, occ + 2 * W, e);
  if (!rc)
    for (int w = 0; w < W; w++) {
      s->peak_dev = fmax(s->peak_dev, occ[w]);
      s->peak_host = fmax(s->peak_host, occ[W + w]);
      s->peak_nvme = fmax(s->peak_nvme, occ[2 * W + w]);
    }
  free(en), free(xs), free(occ), free(end), free(gout), free(wend);
  if (!rc && r.oom) rc = eng_err_set(e, ENG_ENOMEM, "plan simulate: out of memory for the timeline");
  if (rc) eng_plan_sim_free(s);
  return rc;
}

void eng_plan_sim_free(eng_plan_sim *s) {
  free(s->win_start);
  free(s->win_end);
  free(s->span);
  memset(s, 0, sizeof *s);
}

void eng_plan_sim_apply(eng_plan *p, const eng_plan_sim *s) {
  p->step_time = s->step_time;
  p->tokens_per_s = (double)p->batch * p->seq_len / s->step_time;
  p->t_compute = s->t_compute;
  p->t_recompute = s->t_recompute;
  p->t_exposed = s->t_exposed;
  p->t_comm = s->t_comm;
  p->peak_dev = (uint64_t)llround(s->peak_dev);
  p->peak_host = (uint64_t)llround(s->peak_host);
  p->peak_nvme = (uint64_t)llround(s->peak_nvme);
}
