// From a solution of the program to a plan: the choices, the windows, and
// the per-boundary transfers of each aggregated stream.
#include <math.h>
#include <string.h>

#include "plan/milp.h"

// One stream of bytes: boundaries in the order they move, and the
// cumulative boundaries moved by the end of each window.
typedef struct stream {
  eng_lane lane;
  int n;
  int order[ENG_PLAN_MAX_LAYERS];
  const int *cum;   // column of the cumulative variable per window (0: none)
  int w0, w1;       // windows the stream may use
} stream;

static void stream_init(stream *s, const eng_plan *p, eng_lane lane, eng_tier tier, int ascending,
                        const int *cum, int w0, int w1) {
  memset(s, 0, sizeof *s);
  s->lane = lane;
  s->cum = cum;
  s->w0 = w0;
  s->w1 = w1;
  const int L = p->n_layers;
  for (int q = 0; q < L; q++) {
    int i = ascending ? q : L - 1 - q;
    if (p->bnd[i].materialised && p->bnd[i].tier == tier) s->order[s->n++] = i;
  }
}

// Bytes of the stream moved by the end of window w, rounded to whole rows
// and kept within [floor_bytes, total].
static uint64_t stream_pos(const milp *m, const stream *s, const double *x, int w, uint64_t row,
                           uint64_t lo) {
  uint64_t total = (uint64_t)s->n * (uint64_t)m->k->bnd;
  if (w < s->w0) return 0;
  if (w > s->w1) return total;
  int col = s->cum[w];
  double v = col ? x[col] * m->k->bnd : 0.0;
  uint64_t b = (uint64_t)llround(fmax(0.0, v) / (double)row) * row;
  if (b < lo) b = lo;
  return b > total ? total : b;
}

// Emits the stream's transfers of window w: the byte range [a, b) of the
// stream, cut at boundary edges.
static int stream_emit(const stream *s, eng_plan *p, int w, uint64_t a, uint64_t b, eng_err *e) {
  const uint64_t A = p->bnd_bytes;
  while (a < b) {
    uint64_t q = a / A, off = a - q * A, len = A - off;
    if (len > b - a) len = b - a;
    int rc = eng_plan_xfer_add(p, s->order[q], s->lane, w, off, len, e);
    if (rc) return rc;
    a += len;
  }
  return 0;
}

static double val(const double *x, int col) { return col ? x[col] : 0.0; }

int milp_extract(const milp *m, const double *x, eng_plan *p, eng_err *e) {
  const eng_plan_cost *k = m->k;
  const int L = m->L;
  int rc = eng_plan_init(p, L, e);
  if (rc) return rc;
  p->batch = k->batch;
  p->seq_len = k->seq_len;
  p->micro_batch = k->micro_batch;
  p->n_micro = k->n_micro;
  p->ranks = k->ranks;
  p->act_bytes = k->act_bytes;
  p->bnd_bytes = (uint64_t)k->bnd;
  p->row_bytes = (uint64_t)k->d_model * (uint64_t)k->act_bytes;
  p->max_block = m->K;
  p->dev_fixed = (uint64_t)k->dev_fixed;
  p->host_state = (uint64_t)k->host_state;
  p->params = (uint64_t)k->params;
  for (int i = 0; i < L; i++) {
    int t = val(x, m->g[i]) > 0.5 ? ENG_TIER_DEVICE
          : val(x, m->c[i]) > 0.5 ? ENG_TIER_HOST
          : val(x, m->n[i]) > 0.5 ? ENG_TIER_NVME : -1;
    p->bnd[i].materialised = t >= 0;
    p->bnd[i].tier = t >= 0 ? (eng_tier)t : ENG_TIER_DEVICE;
    p->keep_inner[i] = val(x, m->keep[i]) > 0.5;
  }
  if ((rc = eng_plan_structure(p, e))) {
    eng_plan_free(p);
    return rc;
  }
  for (int w = 0; w <= 2 * L; w++) {
    eng_plan_win *win = &p->win[w];
    if (win->kind == ENG_WIN_FWD) win->t_compute = k->d_fwd[w];
    else if (win->kind == ENG_WIN_HEAD) win->t_compute = k->t_head;
    else {
      int j = win->layer;
      win->t_compute = k->t_bwd + (p->keep_inner[j] ? 0.0 : k->t_refwd) + k->t_rec * (j - win->recompute_from);
    }
    win->t_exposed = fmax(val(x, m->tau[w]), 0.0); // the solver's zero may be -1e-17
  }
  stream st[6];
  stream_init(&st[0], p, ENG_LANE_D2H, ENG_TIER_HOST, 1, m->cdc, 0, L - 1);
  stream_init(&st[1], p, ENG_LANE_D2H, ENG_TIER_NVME, 1, m->cdn, 0, L - 1);
  stream_init(&st[2], p, ENG_LANE_NVME_W, ENG_TIER_NVME, 1, m->cwn, 0, L);
  stream_init(&st[3], p, ENG_LANE_NVME_R, ENG_TIER_NVME, 0, m->crn, L + 1, 2 * L);
  stream_init(&st[4], p, ENG_LANE_H2D, ENG_TIER_HOST, 0, m->chc, L, 2 * L);
  stream_init(&st[5], p, ENG_LANE_H2D, ENG_TIER_NVME, 0, m->chn, L, 2 * L);
  uint64_t prev[6] = {0};
  for (int w = 0; w <= 2 * L; w++)
    for (int q = 0; q < 6; q++) {
      if (!st[q].n) continue;
      uint64_t b = stream_pos(m, &st[q], x, w, p->row_bytes, prev[q]);
      if (b > prev[q] && (rc = stream_emit(&st[q], p, w, prev[q], b, e))) {
        eng_plan_free(p);
        return rc;
      }
      prev[q] = b;
    }
  double t = k->t_pre;
  for (int w = 0; w <= 2 * L; w++) t += p->win[w].t_compute + p->win[w].t_exposed;
  p->model_step_time = t;
  return 0;
}
