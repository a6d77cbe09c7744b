// Builds the activation program of plan/milp.h: columns first, then rows.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/milp.h"

int milp_quiet_begin(void) { return glp_term_out(GLP_OFF); }
void milp_quiet_end(int prev) { glp_term_out(prev); }

// ---- a row under construction: coefficients merged per column ---------------

typedef struct rowb {
  int n;
  int *ind;    // 1-based for glp_set_mat_row
  double *val;
  int *pos;    // column -> position in ind (0: absent)
} rowb;

static int rb_init(rowb *r, int ncols) {
  r->n = 0;
  r->ind = malloc(((size_t)ncols + 1) * sizeof *r->ind);
  r->val = malloc(((size_t)ncols + 1) * sizeof *r->val);
  r->pos = calloc((size_t)ncols + 1, sizeof *r->pos);
  return r->ind && r->val && r->pos ? 0 : -1;
}

static void rb_free(rowb *r) {
  free(r->ind);
  free(r->val);
  free(r->pos);
}

static void rb_add(rowb *r, int col, double v) {
  if (!col || v == 0) return;
  if (r->pos[col]) {
    r->val[r->pos[col]] += v;
    return;
  }
  r->n++;
  r->ind[r->n] = col;
  r->val[r->n] = v;
  r->pos[col] = r->n;
}

// Adds the row (type GLP_UP: <= hi, GLP_LO: >= lo, GLP_FX: = lo) and clears r.
static void rb_commit(glp_prob *lp, rowb *r, int type, double lo, double hi) {
  int i = glp_add_rows(lp, 1);
  glp_set_row_bnds(lp, i, type, lo, hi);
  if (r->n) glp_set_mat_row(lp, i, r->n, r->ind, r->val);
  for (int j = 1; j <= r->n; j++) r->pos[r->ind[j]] = 0;
  r->n = 0;
}

// ---- columns ------------------------------------------------------------------

static int col_new(glp_prob *lp, int kind, double lo, double hi, double cost) {
  int j = glp_add_cols(lp, 1);
  glp_set_col_kind(lp, j, kind);
  if (kind != GLP_BV) glp_set_col_bnds(lp, j, hi > lo ? GLP_DB : GLP_FX, lo, hi);
  glp_set_obj_coef(lp, j, cost);
  return j;
}

void milp_free(milp *m) {
  if (m->lp) glp_delete_prob(m->lp);
  int **arrays[] = {&m->x, &m->g, &m->c, &m->n, &m->keep, &m->cdc, &m->cdn, &m->cwn, &m->chc,
                    &m->chn, &m->crn, &m->tau, &m->mo[0], &m->mo[1], &m->mi[0], &m->mi[1]};
  for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++) free(*arrays[i]);
  memset(m, 0, sizeof *m);
}

static int alloc_maps(milp *m) {
  const size_t L = (size_t)m->L, W = 2 * L + 1;
  m->x = calloc(L * ((size_t)m->K + 1) * MILP_TIERS, sizeof *m->x);
  int **perL[] = {&m->g, &m->c, &m->n, &m->keep, &m->cdc, &m->cdn};
  for (size_t i = 0; i < sizeof perL / sizeof perL[0]; i++) *perL[i] = calloc(L, sizeof(int));
  m->cwn = calloc(L + 1, sizeof(int));
  int **perW[] = {&m->chc, &m->chn, &m->crn, &m->tau, &m->mo[0], &m->mo[1], &m->mi[0], &m->mi[1]};
  for (size_t i = 0; i < sizeof perW / sizeof perW[0]; i++) *perW[i] = calloc(W, sizeof(int));
  int ok = m->x && m->cwn;
  for (size_t i = 0; i < sizeof perL / sizeof perL[0]; i++) ok = ok && *perL[i];
  for (size_t i = 0; i < sizeof perW / sizeof perW[0]; i++) ok = ok && *perW[i];
  return ok ? 0 : -1;
}

// Seconds a window's mandatory traffic exceeds its shortest possible
// compute: no plan hides it (the weights and gradients of B_j and H).
static double unavoidable(const eng_plan_cost *k) {
  const int L = k->L;
  double u = fmax(0.0, k->w_layer / k->h2d - k->t_head);
  for (int j = L - 1; j >= 0; j--) {
    double in = j >= 1 ? k->w_layer / k->h2d : 0.0;
    double out = (j == L - 1 ? k->g_head : k->g_layer) / k->d2h;
    u += fmax(0.0, fmax(in, out) - k->t_bwd);
  }
  return u;
}

static void add_columns(milp *m) {
  glp_prob *lp = m->lp;
  const eng_plan_cost *k = m->k;
  const int L = m->L, K = m->K;
  const double ub = L + 1; // no flow or count exceeds the number of boundaries
  for (int s = 0; s < L; s++)
    for (int len = 1; len <= K && s + len <= L; len++)
      for (int t = 0; t < MILP_TIERS; t++)
        if (m->tier_ok[t])
          m->x[((size_t)s * (K + 1) + len) * MILP_TIERS + t] = col_new(lp, GLP_BV, 0, 1, (len - 1) * k->t_rec);
  for (int i = 0; i < L; i++) {
    m->g[i] = col_new(lp, GLP_BV, 0, 1, m->lam_z);
    if (m->tier_ok[ENG_TIER_HOST]) m->c[i] = col_new(lp, GLP_BV, 0, 1, m->lam_z + m->lam_c);
    if (m->tier_ok[ENG_TIER_NVME]) m->n[i] = col_new(lp, GLP_BV, 0, 1, m->lam_z + m->lam_n);
    if (m->keep_ok) m->keep[i] = col_new(lp, GLP_BV, 0, 1, -k->t_refwd);
  }
  for (int w = 0; w <= 2 * L; w++) m->tau[w] = col_new(lp, GLP_CV, 0, 1e6, 1.0);
  const int host = m->tier_ok[ENG_TIER_HOST], nvme = m->tier_ok[ENG_TIER_NVME];
  for (int w = 0; w < L; w++) {
    if (host) m->cdc[w] = col_new(lp, GLP_CV, 0, ub, 0);
    if (nvme) m->cdn[w] = col_new(lp, GLP_CV, 0, ub, 0);
    if (host && w >= 1) m->mo[0][w] = col_new(lp, GLP_IV, 0, ub, 0);
    if (nvme && w >= 1) m->mo[1][w] = col_new(lp, GLP_IV, 0, ub, 0);
  }
  for (int w = L; w <= 2 * L; w++) {
    if (host) m->chc[w] = col_new(lp, GLP_CV, 0, ub, 0);
    if (nvme) m->chn[w] = col_new(lp, GLP_CV, 0, ub, 0);
    if (nvme && w > L) m->crn[w] = col_new(lp, GLP_CV, 0, ub, 0);
    if (host) m->mi[0][w] = col_new(lp, GLP_IV, 0, ub, 0);
    if (nvme) m->mi[1][w] = col_new(lp, GLP_IV, 0, ub, 0);
  }
  if (nvme) {
    for (int w = 0; w <= L; w++) {
      m->cwn[w] = col_new(lp, GLP_CV, 0, w == 0 ? 0 : ub, 0);
    }
  }
}

// Commits a capacity row of tier t (<= cap); elastic, its slack may lift it.
static void cap_commit(milp *m, rowb *r, int t, double cap) {
  rb_add(r, m->slack[t], -1);
  rb_commit(m->lp, r, GLP_UP, 0, cap);
}

// Sum over the off-device tiers of boundary i (c_i + n_i), with factor v.
static void add_off(const milp *m, rowb *r, int i, double v) {
  rb_add(r, m->c[i], v);
  rb_add(r, m->n[i], v);
}

// Sum over tiers of edge (s, e), with factor v.
static void add_edge(const milp *m, rowb *r, int s, int e, double v) {
  for (int t = 0; t < MILP_TIERS; t++) rb_add(r, milp_x(m, s, e, t), v);
}

static void add_rows(milp *m, rowb *r) {
  glp_prob *lp = m->lp;
  const eng_plan_cost *k = m->k;
  const int L = m->L, K = m->K;
  // Boundaries count in units of one boundary: on the device one buffer of
  // the executor's pool (bnd_dev), elsewhere its bytes (bnd).
  const double A = k->bnd;
  const double capD = k->cap_dev / k->bnd_dev, capC = k->cap_host / A, capN = k->cap_nvme / A;
  const double I = k->inner / k->bnd_dev, W = k->w_layer / A;
  const double bwI = k->h2d / A, bwO = k->d2h / A, bwW = k->nvme_write / A, bwR = k->nvme_read / A;
  const int host = m->tier_ok[ENG_TIER_HOST], nvme = m->tier_ok[ENG_TIER_NVME];

  // The blocks form one path from boundary 0 to L.
  for (int e = 1; e <= K && e <= L; e++) add_edge(m, r, 0, e, 1);
  rb_commit(lp, r, GLP_FX, 1, 1);
  for (int i = 1; i < L; i++) {
    for (int s = i - K < 0 ? 0 : i - K; s < i; s++) add_edge(m, r, s, i, 1);
    for (int e = i + 1; e <= i + K && e <= L; e++) add_edge(m, r, i, e, -1);
    rb_commit(lp, r, GLP_FX, 0, 0);
  }
  // A boundary's tier is its out-edge's.
  int *tcol[MILP_TIERS] = {m->g, m->c, m->n};
  for (int t = 0; t < MILP_TIERS; t++) {
    if (!m->tier_ok[t]) continue;
    for (int i = 0; i < L; i++) {
      rb_add(r, tcol[t][i], 1);
      for (int e = i + 1; e <= i + K && e <= L; e++) rb_add(r, milp_x(m, i, e, t), -1);
      rb_commit(lp, r, GLP_FX, 0, 0);
    }
  }

  // Capacity, with the rounding cuts: boundaries are all the same size, so
  // a tier holds at most floor(cap) of them (floors of the coefficients on
  // the kept layers keep the device cut valid). Elastic, the plain rows.
  if (host) {
    for (int i = 0; i < L; i++) rb_add(r, m->c[i], 1);
    cap_commit(m, r, ENG_TIER_HOST, m->slack[0] ? capC : floor(capC));
  }
  if (nvme) {
    for (int i = 0; i < L; i++) rb_add(r, m->n[i], 1);
    cap_commit(m, r, ENG_TIER_NVME, m->slack[0] ? capN : floor(capN));
  }
  if (!m->slack[0]) {
    for (int i = 0; i < L; i++) rb_add(r, m->g[i], 1);
    if (m->keep_ok)
      for (int l = 0; l < L; l++) rb_add(r, m->keep[l], floor(I));
    rb_commit(lp, r, GLP_UP, 0, floor(capD));
    // During the head the device also holds the boundary the first backward
    // block starts from (stored there, or copied in from the head on):
    // at least one boundary beside the kept layers.
    for (int i = 0; i < L; i++) rb_add(r, m->g[i], 1);
    rb_add(r, m->mi[0][L], 1);
    rb_add(r, m->mi[1][L], 1);
    rb_commit(lp, r, GLP_LO, 1, 0);
    // Hence how many layers can keep their inner activations at all (the
    // relaxation would keep a fraction more).
    if (m->keep_ok) {
      for (int l = 0; l < L; l++) rb_add(r, m->keep[l], 1);
      rb_commit(lp, r, GLP_UP, 0, floor(fmax(capD - 1, 0) / I));
    }
    double total = floor(capD) + (host ? floor(capC) : 0) + (nvme ? floor(capN) : 0);
    for (int i = 0; i < L; i++) {
      rb_add(r, m->g[i], 1);
      add_off(m, r, i, 1);
    }
    rb_commit(lp, r, GLP_UP, 0, total);
  }

  // Device bytes in every window. Forward F_w: device-tier boundaries 0..w,
  // boundaries still in transit out, every kept layer (the executor lays
  // the kept activations out for the whole step: exec.h's arena).
  int *dcum[2] = {m->cdc, m->cdn}, *hcum[2] = {m->chc, m->chn}, *tcol2[2] = {m->c, m->n};
  for (int w = 0; w < L; w++) {
    for (int i = 0; i <= w; i++) rb_add(r, m->g[i], 1);
    if (m->keep_ok)
      for (int l = 0; l < L; l++) rb_add(r, m->keep[l], I);
    rb_add(r, m->mo[0][w], 1);
    rb_add(r, m->mo[1][w], 1);
    cap_commit(m, r, ENG_TIER_DEVICE, capD);
    // mo_w >= the stream's boundaries before w not fully copied out by the end of F_{w-1}
    for (int q = 0; q < 2; q++) {
      if (!m->mo[q][w]) continue;
      rb_add(r, m->mo[q][w], 1);
      for (int i = 0; i < w; i++) rb_add(r, tcol2[q][i], -1);
      rb_add(r, dcum[q][w - 1], 1);
      rb_commit(lp, r, GLP_LO, 0, 0);
    }
  }
  // Head and backward B_j: device-tier boundaries 0..j (later ones consumed),
  // boundaries copied in and not yet consumed, the recomputed interior of
  // the block being processed, every kept layer.
  for (int w = L; w <= 2 * L; w++) {
    int j = w == L ? L - 1 : 2 * L - w;
    for (int i = 0; i <= j; i++) rb_add(r, m->g[i], 1);
    if (m->keep_ok)
      for (int l = 0; l < L; l++) rb_add(r, m->keep[l], I);
    rb_add(r, m->mi[0][w], 1);
    rb_add(r, m->mi[1][w], 1);
    if (w > L)
      for (int s = j - K + 1 < 0 ? 0 : j - K + 1; s < j; s++)
        for (int e = j + 1; e <= s + K && e <= L; e++) add_edge(m, r, s, e, j - s);
    cap_commit(m, r, ENG_TIER_DEVICE, capD);
    // mi_w >= the stream's boundaries copied in (partly) and not yet consumed
    for (int q = 0; q < 2; q++) {
      if (!m->mi[q][w]) continue;
      rb_add(r, m->mi[q][w], 1);
      rb_add(r, hcum[q][w], -1);
      if (w > L)
        for (int i = j + 1; i < L; i++) rb_add(r, tcol2[q][i], 1);
      rb_commit(lp, r, GLP_LO, 0, 0);
    }
  }

  // Host: the host tier, plus the staging ring of the NVMe traffic: bytes
  // copied out and not yet written, read and not yet copied in (the ring
  // frees chunk by chunk, so bytes count, not whole boundaries). The plan
  // moves whole token rows: a row of margin per stream covers the rounding.
  const double ring_margin = 2.0 * k->d_model * k->act_bytes / A;
  if (nvme) {
    for (int w = 0; w <= 2 * L; w++) {
      for (int i = 0; i < L; i++) rb_add(r, m->c[i], 1);
      if (w <= L) {
        rb_add(r, m->cdn[w < L ? w : L - 1], 1);
        if (w > 0) rb_add(r, m->cwn[w - 1], -1);
      } else {
        rb_add(r, m->crn[w], 1);
        rb_add(r, m->chn[w - 1], -1);
      }
      cap_commit(m, r, ENG_TIER_HOST, capC - ring_margin);
    }
  }

  // Copy-out in the forward: boundary i is the input of F_i and may leave
  // from then on; all are out by the end of the forward.
  int *dcol[2] = {m->cdc, m->cdn};
  int *tiercol[2] = {m->c, m->n};
  for (int q = 0; q < 2; q++) {
    if (!m->tier_ok[1 + q]) continue;
    for (int w = 0; w < L; w++) {
      rb_add(r, dcol[q][w], 1);
      for (int i = 0; i <= w; i++) rb_add(r, tiercol[q][i], -1);
      rb_commit(lp, r, w == L - 1 ? GLP_FX : GLP_UP, 0, 0);
      if (w >= 1) {
        rb_add(r, dcol[q][w], 1);
        rb_add(r, dcol[q][w - 1], -1);
        rb_commit(lp, r, GLP_LO, 0, 0);
      }
    }
  }
  // NVMe writes follow the copy-out by a window and end with the head.
  if (nvme) {
    for (int w = 1; w <= L; w++) {
      rb_add(r, m->cwn[w], 1);
      rb_add(r, m->cwn[w - 1], -1);
      rb_commit(lp, r, GLP_LO, 0, 0);
      rb_add(r, m->cwn[w], 1);
      rb_add(r, m->cdn[w - 1], -1);
      rb_commit(lp, r, GLP_UP, 0, 0);
    }
    rb_add(r, m->cwn[L], 1);
    for (int i = 0; i < L; i++) rb_add(r, m->n[i], -1);
    rb_commit(lp, r, GLP_FX, 0, 0);
  }
  // Copy-in from the head on: boundary i (start of block (i, e)) is on the
  // device by the start of B_{e-1}. Before B_j that is every off-device
  // boundary i >= j, and the start of the block around j.
  int *hcol[2] = {m->chc, m->chn};
  for (int q = 0; q < 2; q++) {
    if (!m->tier_ok[1 + q]) continue;
    int t = 1 + q;
    for (int w = L + 1; w <= 2 * L; w++) {
      int j = 2 * L - w;
      rb_add(r, hcol[q][w], 1);
      rb_add(r, hcol[q][w - 1], -1);
      rb_commit(lp, r, GLP_LO, 0, 0);
      rb_add(r, hcol[q][w - 1], 1);
      for (int i = j; i < L; i++) rb_add(r, tiercol[q][i], -1);
      for (int s = j - K + 1 < 0 ? 0 : j - K + 1; s < j; s++)
        for (int e = j + 1; e <= s + K && e <= L; e++) rb_add(r, milp_x(m, s, e, t), -1);
      rb_commit(lp, r, GLP_LO, 0, 0);
    }
    rb_add(r, hcol[q][2 * L], 1);
    for (int i = 0; i < L; i++) rb_add(r, tiercol[q][i], -1);
    rb_commit(lp, r, GLP_FX, 0, 0);
  }
  // NVMe reads run from the first backward window and lead the copy-in by one.
  if (nvme) {
    for (int w = L + 1; w <= 2 * L; w++) {
      if (w > L + 1) {
        rb_add(r, m->crn[w], 1);
        rb_add(r, m->crn[w - 1], -1);
        rb_commit(lp, r, GLP_LO, 0, 0);
      }
      rb_add(r, m->chn[w], 1);
      if (w > L + 1) rb_add(r, m->crn[w - 1], -1);
      rb_commit(lp, r, GLP_UP, 0, 0);
    }
    rb_add(r, m->chn[L], 1);
    rb_commit(lp, r, GLP_FX, 0, 0);
    rb_add(r, m->crn[2 * L], 1);
    for (int i = 0; i < L; i++) rb_add(r, m->n[i], -1);
    rb_commit(lp, r, GLP_FX, 0, 0);
  }

  // Links: each window carries its bytes within compute + tau.
  for (int w = 0; w < L; w++) {
    double d = k->d_fwd[w];
    if (host || nvme) {
      for (int q = 0; q < 2; q++) {
        rb_add(r, dcol[q][w], 1);
        if (w > 0) rb_add(r, dcol[q][w - 1], -1);
      }
      rb_add(r, m->tau[w], -bwO);
      rb_commit(lp, r, GLP_UP, 0, bwO * d);
    }
    if (nvme) {
      rb_add(r, m->cwn[w], 1);
      if (w > 0) rb_add(r, m->cwn[w - 1], -1);
      rb_add(r, m->tau[w], -bwW);
      rb_commit(lp, r, GLP_UP, 0, bwW * d);
    }
  }
  // Head: the first backward entry's weights (and copy-ins) come in.
  for (int q = 0; q < 2; q++) rb_add(r, hcol[q][L], 1);
  rb_add(r, m->tau[L], -bwI);
  rb_commit(lp, r, GLP_UP, 0, bwI * k->t_head - W);
  if (nvme) {
    rb_add(r, m->cwn[L], 1);
    rb_add(r, m->cwn[L - 1], -1);
    rb_add(r, m->tau[L], -bwW);
    rb_commit(lp, r, GLP_UP, 0, bwW * k->t_head);
  }
  // B_j: compute = backward + re-forward (unless kept) + the recompute of
  // the block (s, j+1) it opens, whose layers stream their weights again
  // (t_rec each covers that). Copy-ins start with the backward itself (the
  // recompute's weights would queue behind them) and share the link with the
  // next window's first weights; the other links have the whole window.
  for (int w = L + 1; w <= 2 * L; w++) {
    int j = 2 * L - w;
    double base = k->t_bwd + k->t_refwd;
    double mand_in = j >= 1 ? W : 0.0;
    double mand_out = (j == L - 1 ? k->g_head : k->g_layer) / A;
    const double bws[3] = {bwI, bwO, bwR};
    for (int lane = 0; lane < 3; lane++) {
      double bw = bws[lane];
      if (lane == 2 && !nvme) continue;
      // the window's duration times bw, moved to the left side
      rb_add(r, m->tau[w], -bw);
      if (m->keep_ok) rb_add(r, m->keep[j], bw * k->t_refwd);
      if (lane > 0)
        for (int s = j - K + 1 < 0 ? 0 : j - K + 1; s < j; s++) add_edge(m, r, s, j + 1, -bw * k->t_rec * (j - s));
      double rhs = bw * base;
      if (lane == 0) {
        for (int q = 0; q < 2; q++) {
          rb_add(r, hcol[q][w], 1);
          rb_add(r, hcol[q][w - 1], -1);
        }
        rhs -= mand_in;
      } else if (lane == 1) {
        rhs -= mand_out;
      } else {
        rb_add(r, m->crn[w], 1);
        if (w > L + 1) rb_add(r, m->crn[w - 1], -1);
      }
      rb_commit(lp, r, GLP_UP, 0, rhs);
    }
  }
}

double milp_lower_bound(const eng_plan_cost *k) {
  double fwd = 0;
  for (int l = 0; l < k->L; l++) fwd += k->d_fwd[l];
  return k->t_pre + fwd + k->t_head + k->L * k->t_bwd + unavoidable(k);
}

int milp_build(milp *m, const eng_plan_cost *k, const eng_plan_opts *o, int elastic, eng_err *e) {
  memset(m, 0, sizeof *m);
  m->k = k;
  m->L = k->L;
  m->K = o->max_block < k->L ? o->max_block : k->L;
  if (m->K < 1) m->K = 1;
  const double A = k->bnd;
  m->tier_ok[ENG_TIER_DEVICE] = 1;
  m->tier_ok[ENG_TIER_HOST] = !o->no_host && (elastic || k->cap_host >= A);
  m->tier_ok[ENG_TIER_NVME] = !o->no_nvme && (elastic || k->cap_nvme >= A);
  m->keep_ok = !o->no_keep && (elastic || k->inner <= k->cap_dev);
  // Tie-breakers: far below any time the plan controls, far above the
  // solver's tolerances (milp_solve runs with tol_obj 1e-12).
  m->lam_z = 1e-4 * k->t_fwd;
  m->lam_c = 1e-4 * k->t_fwd;
  m->lam_n = 3e-4 * k->t_fwd;
  m->lb_step = milp_lower_bound(k);
  m->obj_const = elastic ? 0.0 : k->L * k->t_refwd - unavoidable(k);
  if (alloc_maps(m)) {
    milp_free(m);
    return eng_err_set(e, ENG_ENOMEM, "plan: cannot allocate the program's tables");
  }
  int q = milp_quiet_begin();
  m->lp = glp_create_prob();
  glp_set_obj_dir(m->lp, GLP_MIN);
  glp_set_obj_coef(m->lp, 0, m->obj_const);
  add_columns(m);
  if (elastic) {
    int n = glp_get_num_cols(m->lp);
    for (int j = 1; j <= n; j++) glp_set_obj_coef(m->lp, j, 0.0);
    for (int t = 0; t < MILP_TIERS; t++) m->slack[t] = col_new(m->lp, GLP_CV, 0, 1e9, 1.0);
  }
  rowb r;
  if (rb_init(&r, glp_get_num_cols(m->lp))) {
    rb_free(&r);
    milp_quiet_end(q);
    milp_free(m);
    return eng_err_set(e, ENG_ENOMEM, "plan: cannot allocate the program's rows");
  }
  add_rows(m, &r);
  rb_free(&r);
  milp_quiet_end(q);
  return 0;
}
