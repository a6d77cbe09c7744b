// The simulator's independent check of a plan (plan/sim.h): everything is
// recomputed from the plan's choices, its transfer list and the cost model,
// sharing nothing with the program that produced the plan.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/sim.h"

// Transfers of one boundary on one lane.
typedef struct ranges {
  int n;
  const eng_plan_xfer **x;
} ranges;

typedef struct xfer_index {
  int L;
  ranges *r;            // [(L + 1) * ENG_LANE_COUNT]
  const eng_plan_xfer **pool;
} xfer_index;

static void xi_free(xfer_index *xi) {
  free(xi->r);
  free(xi->pool);
}

static ranges *xi_get(const xfer_index *xi, int i, int lane) { return &xi->r[i * ENG_LANE_COUNT + lane]; }

static int by_offset(const void *a, const void *b) {
  const eng_plan_xfer *x = *(const eng_plan_xfer *const *)a, *y = *(const eng_plan_xfer *const *)b;
  return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int xi_build(xfer_index *xi, const eng_plan *p, eng_err *e) {
  const int L = p->n_layers;
  xi->L = L;
  xi->r = calloc(((size_t)L + 1) * ENG_LANE_COUNT, sizeof *xi->r);
  xi->pool = malloc(((size_t)p->n_xfer + 1) * sizeof *xi->pool);
  if (!xi->r || !xi->pool) {
    xi_free(xi);
    return eng_err_set(e, ENG_ENOMEM, "plan check: out of memory");
  }
  for (int t = 0; t < p->n_xfer; t++) {
    const eng_plan_xfer *x = &p->xfer[t];
    if (x->boundary < 0 || x->boundary > L || (unsigned)x->lane >= ENG_LANE_COUNT || x->window < 0 ||
        x->window > 2 * L || x->bytes == 0) {
      xi_free(xi);
      return eng_err_set(e, ENG_EINVAL, "plan check: transfer %d (boundary %d, lane %d, window %d, %llu bytes) is malformed",
                         t, x->boundary, (int)x->lane, x->window, (unsigned long long)x->bytes);
    }
    xi_get(xi, x->boundary, x->lane)->n++;
  }
  int at = 0;
  for (int q = 0; q < (L + 1) * ENG_LANE_COUNT; q++) {
    xi->r[q].x = xi->pool + at;
    at += xi->r[q].n;
    xi->r[q].n = 0;
  }
  for (int t = 0; t < p->n_xfer; t++) {
    ranges *r = xi_get(xi, p->xfer[t].boundary, p->xfer[t].lane);
    r->x[r->n++] = &p->xfer[t];
  }
  for (int q = 0; q < (L + 1) * ENG_LANE_COUNT; q++)
    qsort(xi->r[q].x, (size_t)xi->r[q].n, sizeof *xi->r[q].x, by_offset);
  return 0;
}

static int first_win(const ranges *r) {
  int w = 1 << 30;
  for (int t = 0; t < r->n; t++) w = r->x[t]->window < w ? r->x[t]->window : w;
  return w;
}

static int last_win(const ranges *r) {
  int w = -1;
  for (int t = 0; t < r->n; t++) w = r->x[t]->window > w ? r->x[t]->window : w;
  return w;
}

// ---- structure ---------------------------------------------------------------------

// The block each boundary starts, the window layout, recompute starts.
static int check_structure(const eng_plan *p, eng_err *e) {
  const int L = p->n_layers;
  if (!p->bnd[0].materialised) return eng_err_set(e, ENG_EINVAL, "plan check: boundary 0 is not materialised");
  if (p->bnd[L].materialised) return eng_err_set(e, ENG_EINVAL, "plan check: boundary %d (the head's input) is stored", L);
  int next = L;
  for (int i = L - 1; i >= 0; i--) {
    if (!p->bnd[i].materialised) continue;
    if (p->bnd[i].block_end != next)
      return eng_err_set(e, ENG_EINVAL, "plan check: boundary %d says its block ends at %d, the next materialised boundary is %d",
                         i, p->bnd[i].block_end, next);
    if (p->max_block > 0 && next - i > p->max_block)
      return eng_err_set(e, ENG_EINVAL, "plan check: block (%d, %d) is longer than %d", i, next, p->max_block);
    if ((unsigned)p->bnd[i].tier > ENG_TIER_NVME)
      return eng_err_set(e, ENG_EINVAL, "plan check: boundary %d has tier %d", i, (int)p->bnd[i].tier);
    next = i;
  }
  int start = 0;
  for (int j = 0; j < L; j++) {
    if (p->bnd[j].materialised) start = j;
    const eng_plan_win *f = &p->win[j], *b = &p->win[2 * L - j];
    int opens = j + 1 == L || p->bnd[j + 1].materialised; // j is the last layer of its block
    int rf = opens ? start : j;
    if (f->kind != ENG_WIN_FWD || f->layer != j || b->kind != ENG_WIN_BWD || b->layer != j || b->recompute_from != rf)
      return eng_err_set(e, ENG_EINVAL, "plan check: windows of layer %d do not match the blocks (recompute from %d expected)",
                         j, rf);
  }
  if (p->win[L].kind != ENG_WIN_HEAD) return eng_err_set(e, ENG_EINVAL, "plan check: window %d is not the head", L);
  return 0;
}

// ---- transfers ------------------------------------------------------------------------

// The ranges of one boundary on one lane tile [0, A) exactly.
static int check_tiles(const ranges *r, uint64_t A, int i, eng_lane lane, eng_err *e) {
  uint64_t at = 0;
  for (int t = 0; t < r->n; t++) {
    if (r->x[t]->offset != at)
      return eng_err_set(e, ENG_EINVAL, "plan check: boundary %d: its transfers on %s leave a gap or overlap at byte %llu", i,
                         eng_lane_name(lane), (unsigned long long)at);
    at += r->x[t]->bytes;
  }
  if (at != A)
    return eng_err_set(e, ENG_EINVAL, "plan check: boundary %d moves %llu bytes on %s, its size is %llu", i,
                       (unsigned long long)at, eng_lane_name(lane), (unsigned long long)A);
  return 0;
}

// Every byte moves on lane `before` in an earlier window than on `after`.
static int check_order(const ranges *before, const ranges *after, int i, eng_err *e) {
  for (int a = 0; a < after->n; a++) {
    const eng_plan_xfer *y = after->x[a];
    for (int b = 0; b < before->n; b++) {
      const eng_plan_xfer *x = before->x[b];
      if (x->offset < y->offset + y->bytes && y->offset < x->offset + x->bytes && x->window >= y->window)
        return eng_err_set(e, ENG_EINVAL, "plan check: boundary %d bytes %llu.. move on %s in window %d, not after %s in window %d",
                           i, (unsigned long long)y->offset, eng_lane_name(y->lane), y->window,
                           eng_lane_name(x->lane), x->window);
    }
  }
  return 0;
}

static int check_windows(const ranges *r, int lo, int hi, int i, eng_lane lane, eng_err *e) {
  for (int t = 0; t < r->n; t++)
    if (r->x[t]->window < lo || r->x[t]->window > hi)
      return eng_err_set(e, ENG_EINVAL, "plan check: boundary %d moves on %s in window %d, outside windows %d..%d", i,
                         eng_lane_name(lane), r->x[t]->window, lo, hi);
  return 0;
}

static int check_transfers(const eng_plan *p, const xfer_index *xi, eng_err *e) {
  const int L = p->n_layers;
  const uint64_t A = p->bnd_bytes;
  for (int i = 0; i <= L; i++) {
    const eng_plan_bnd *b = &p->bnd[i];
    int off = b->materialised && b->tier != ENG_TIER_DEVICE, nv = off && b->tier == ENG_TIER_NVME;
    const ranges *out = xi_get(xi, i, ENG_LANE_D2H), *in = xi_get(xi, i, ENG_LANE_H2D);
    const ranges *wr = xi_get(xi, i, ENG_LANE_NVME_W), *rd = xi_get(xi, i, ENG_LANE_NVME_R);
    int rc;
    if (!off) {
      if (out->n || in->n || wr->n || rd->n)
        return eng_err_set(e, ENG_EINVAL, "plan check: boundary %d stays on the device (or is recomputed) but has transfers", i);
      continue;
    }
    if (!nv && (wr->n || rd->n))
      return eng_err_set(e, ENG_EINVAL, "plan check: boundary %d lives in host memory but has NVMe transfers", i);
    // Out in the forward from its own window, back in from the head until
    // the window before its block's backward begins.
    int need = 2 * L - (b->block_end - 1);
    if ((rc = check_tiles(out, A, i, ENG_LANE_D2H, e)) || (rc = check_tiles(in, A, i, ENG_LANE_H2D, e)) ||
        (rc = check_windows(out, i, L - 1, i, ENG_LANE_D2H, e)) ||
        (rc = check_windows(in, L, need - 1, i, ENG_LANE_H2D, e)) || (rc = check_order(out, in, i, e)))
      return rc;
    if (nv && ((rc = check_tiles(wr, A, i, ENG_LANE_NVME_W, e)) || (rc = check_tiles(rd, A, i, ENG_LANE_NVME_R, e)) ||
               (rc = check_order(out, wr, i, e)) || (rc = check_order(wr, rd, i, e)) ||
               (rc = check_order(rd, in, i, e))))
      return rc;
  }
  return 0;
}

// ---- bytes per tier ------------------------------------------------------------------------

static void add_span(double *v, int w0, int w1, double bytes) {
  for (int w = w0; w <= w1; w++) v[w] += bytes;
}

static void occupancy(const eng_plan *p, const eng_plan_cost *k, const xfer_index *xi, double *dev,
                      double *host, double *nvme) {
  const int L = p->n_layers, W = 2 * L + 1;
  const double A = (double)p->bnd_bytes, Ad = k->bnd_dev; // a boundary's bytes; its buffer on the device
  memset(dev, 0, (size_t)W * sizeof *dev);
  memset(host, 0, (size_t)W * sizeof *host);
  memset(nvme, 0, (size_t)W * sizeof *nvme);
  for (int i = 0; i < L; i++) {
    const eng_plan_bnd *b = &p->bnd[i];
    // Kept inner activations are laid out for the whole step (exec.h).
    if (p->keep_inner[i]) add_span(dev, 0, W - 1, k->inner);
    if (!b->materialised) continue;
    // The recomputed interior of the block (i, e): boundary m from the
    // block's first backward window until its layer's backward ends.
    for (int m = i + 1; m < b->block_end; m++) add_span(dev, 2 * L - (b->block_end - 1), 2 * L - m, Ad);
    if (b->tier == ENG_TIER_DEVICE) {
      add_span(dev, i, 2 * L - i, Ad);
      continue;
    }
    const ranges *out = xi_get(xi, i, ENG_LANE_D2H), *in = xi_get(xi, i, ENG_LANE_H2D);
    // In F_i it is the layer's input (a working buffer); after that its own
    // buffer until the window its copy-out ends; back from the first copy-in.
    add_span(dev, i + 1, last_win(out), Ad);
    add_span(dev, first_win(in), 2 * L - i, Ad);
    if (b->tier == ENG_TIER_HOST) {
      add_span(host, first_win(out), last_win(in), A);
    } else {
      const ranges *wr = xi_get(xi, i, ENG_LANE_NVME_W), *rd = xi_get(xi, i, ENG_LANE_NVME_R);
      add_span(nvme, first_win(wr), last_win(rd), A);
    }
  }
  // NVMe traffic stages through a ring of host chunks (plan.h): a byte holds
  // its chunk from the window it arrives in through the window it leaves in.
  for (int t = 0; t < p->n_xfer; t++) {
    const eng_plan_xfer *x = &p->xfer[t];
    if (p->bnd[x->boundary].tier != ENG_TIER_NVME) continue;
    double v = (double)x->bytes;
    if (x->lane == ENG_LANE_D2H || x->lane == ENG_LANE_NVME_R) add_span(host, x->window, W - 1, v);
    else add_span(host, x->window + 1, W - 1, -v); // written, or copied in: free from the next window
  }
}

int eng_plan_occupancy(const eng_plan *p, const eng_plan_cost *k, double *dev, double *host,
                       double *nvme, eng_err *e) {
  xfer_index xi;
  int rc = xi_build(&xi, p, e);
  if (rc) return rc;
  occupancy(p, k, &xi, dev, host, nvme);
  xi_free(&xi);
  return 0;
}

// ---- links ----------------------------------------------------------------------------------

// Compute seconds of window w from the cost model and the plan's choices.
static double window_compute(const eng_plan *p, const eng_plan_cost *k, int w) {
  const eng_plan_win *win = &p->win[w];
  if (win->kind == ENG_WIN_FWD) return k->d_fwd[w];
  if (win->kind == ENG_WIN_HEAD) return k->t_head;
  int j = win->layer;
  return k->t_bwd + (p->keep_inner[j] ? 0.0 : k->t_refwd) + k->t_rec * (j - win->recompute_from);
}

static int check_links(const eng_plan *p, const eng_plan_cost *k, eng_err *e) {
  const int L = p->n_layers, W = 2 * L + 1;
  double *bytes = calloc((size_t)W * ENG_LANE_COUNT, sizeof *bytes);
  if (!bytes) return eng_err_set(e, ENG_ENOMEM, "plan check: out of memory");
  for (int t = 0; t < p->n_xfer; t++) bytes[p->xfer[t].window * ENG_LANE_COUNT + p->xfer[t].lane] += (double)p->xfer[t].bytes;
  const double bw[ENG_LANE_COUNT] = {k->h2d, k->d2h, k->nvme_write, k->nvme_read};
  int rc = 0;
  for (int w = 0; w < W && !rc; w++) {
    const eng_plan_win *win = &p->win[w];
    double c = window_compute(p, k, w);
    if (fabs(c - win->t_compute) > 1e-9 * (1 + c)) {
      rc = eng_err_set(e, ENG_EINVAL, "plan check: window %d computes for %.9g s by the cost model, the plan says %.9g", w, c,
                       win->t_compute);
      break;
    }
    if (!(win->t_exposed >= 0)) {
      rc = eng_err_set(e, ENG_EINVAL, "plan check: window %d has exposed time %g", w, win->t_exposed);
      break;
    }
    double *b = &bytes[w * ENG_LANE_COUNT];
    // The forward's weight stream is paced into its windows already (cost.h).
    if (win->kind == ENG_WIN_FWD && b[ENG_LANE_H2D] > 0) {
      rc = eng_err_set(e, ENG_EINVAL, "plan check: forward window %d copies activations in", w);
      break;
    }
    if (win->kind == ENG_WIN_HEAD) b[ENG_LANE_H2D] += k->w_layer;
    double dur = c + win->t_exposed, dur_in = dur;
    if (win->kind == ENG_WIN_BWD) {
      // The recompute's layers take their own weights' time (t_rec each);
      // copy-ins start with the backward itself and share the link with the
      // next window's first weights.
      int j = win->layer, rec = j - win->recompute_from;
      if (j >= 1) b[ENG_LANE_H2D] += k->w_layer;
      dur_in = dur - rec * k->t_rec;
      b[ENG_LANE_D2H] += j == L - 1 ? k->g_head : k->g_layer;
    }
    for (int lane = 0; lane < ENG_LANE_COUNT; lane++) {
      if (win->kind == ENG_WIN_FWD && lane == ENG_LANE_H2D) continue;
      double d = lane == ENG_LANE_H2D ? dur_in : dur;
      // Slack: rounding to rows moves at most a row per stream between windows.
      double slack = 1e-6 * (b[lane] + bw[lane] * d) + 4.0 * (double)p->row_bytes;
      if (b[lane] > bw[lane] * d + slack) {
        rc = eng_err_set(e, ENG_EINVAL, "plan check: window %d carries %.0f bytes on %s, %.0f fit in its %.6g s", w, b[lane],
                         eng_lane_name((eng_lane)lane), bw[lane] * d, d);
        break;
      }
    }
  }
  free(bytes);
  return rc;
}

int eng_plan_check(const eng_plan *p, const eng_plan_cost *k, eng_err *e) {
  const int L = p->n_layers;
  if (L != k->L || p->batch != k->batch || p->seq_len != k->seq_len || p->micro_batch != k->micro_batch)
    return eng_err_set(e, ENG_EINVAL, "plan check: the plan is for %d layers, batch %d x %d, micro-batch %d; the cost for %d, %d x %d, %d",
                       L, p->batch, p->seq_len, p->micro_batch, k->L, k->batch, k->seq_len, k->micro_batch);
  if (fabs((double)p->bnd_bytes - k->bnd) > 0.5)
    return eng_err_set(e, ENG_EINVAL, "plan check: boundary of %llu bytes, the cost model says %.0f",
                       (unsigned long long)p->bnd_bytes, k->bnd);
  int rc = check_structure(p, e);
  if (rc) return rc;
  xfer_index xi;
  if ((rc = xi_build(&xi, p, e))) return rc;
  if ((rc = check_transfers(p, &xi, e))) {
    xi_free(&xi);
    return rc;
  }
  const int W = 2 * L + 1;
  double *occ = malloc(3 * (size_t)W * sizeof *occ);
  if (!occ) {
    xi_free(&xi);
    return eng_err_set(e, ENG_ENOMEM, "plan check: out of memory");
  }
  occupancy(p, k, &xi, occ, occ + W, occ + 2 * W);
  xi_free(&xi);
  const char *tier[3] = {"device", "host", "NVMe"};
  const double cap[3] = {k->cap_dev, k->cap_host, k->cap_nvme};
  for (int t = 0; t < 3 && !rc; t++)
    for (int w = 0; w < W; w++)
      if (occ[t * W + w] > cap[t] + 1e-9 * fabs(cap[t]) + 1.0) {
        rc = eng_err_set(e, ENG_EINVAL, "plan check: window %d holds %.0f activation bytes in %s, the budget is %.0f", w,
                         occ[t * W + w], tier[t], cap[t]);
        break;
      }
  free(occ);
  return rc ? rc : check_links(p, k, e);
}
