// Solving the activation program: a fixed choice (the transfer schedule of
// a given placement), the heuristic incumbent, and branch and bound.
#include <float.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "plan/milp.h"


// ---- a fixed choice -------------------------------------------------------------

static void fix(glp_prob *lp, int col, double v) {
  if (col) glp_set_col_bnds(lp, col, GLP_FX, v, v);
}

// Fixes every binary of lp (a copy of m's) to the choice; 1 when the choice
// needs an edge the program does not have (a block longer than K, a tier
// that is not offered).
static int fix_choice(const milp *m, glp_prob *lp, const milp_choice *ch) {
  const int L = m->L, K = m->K;
  int bad = ch->tier[0] < 0;
  for (int s = 0; s < L; s++) {
    int e = s + 1;
    while (e < L && ch->tier[e] < 0) e++;
    for (int len = 1; len <= K && s + len <= L; len++)
      for (int t = 0; t < MILP_TIERS; t++)
        fix(lp, milp_x(m, s, s + len, t), ch->tier[s] == t && s + len == e);
    if (ch->tier[s] >= 0 && (!milp_x(m, s, e, ch->tier[s]))) bad = 1;
    fix(lp, m->g[s], ch->tier[s] == ENG_TIER_DEVICE);
    fix(lp, m->c[s], ch->tier[s] == ENG_TIER_HOST);
    fix(lp, m->n[s], ch->tier[s] == ENG_TIER_NVME);
    fix(lp, m->keep[s], ch->keep[s]);
    if (ch->keep[s] && !m->keep[s]) bad = 1;
  }
  return bad;
}

// GLPK 5.0's MIP presolver can return a point that violates a row (seen
// here on these programs: a singleton row turned bound, lost), so every
// solve runs without it: the simplex first, then branch and bound on the
// original rows, and the answer is checked against every row anyway.
static int solve_no_presolve(glp_prob *lp, glp_iocp *p) {
  // GLPK fathoms nodes within tol_obj (relative) of the incumbent: keep that
  // far below the tie-breakers so that ties are broken as the objective says.
  p->tol_obj = 1e-12;
  glp_smcp sp;
  glp_init_smcp(&sp);
  sp.msg_lev = GLP_MSG_OFF;
  if (glp_simplex(lp, &sp) || glp_get_status(lp) != GLP_OPT) return -1;
  p->presolve = GLP_OFF;
  return glp_intopt(lp, p);
}

int milp_solve_fixed(milp *m, const milp_choice *ch, double *x, double *obj) {
  int q = milp_quiet_begin();
  glp_prob *lp = glp_create_prob();
  glp_copy_prob(lp, m->lp, GLP_OFF);
  int rc = 1;
  if (!fix_choice(m, lp, ch)) {
    glp_iocp p;
    glp_init_iocp(&p);
    p.msg_lev = GLP_MSG_OFF;
    p.tm_lim = 2000;
    int ret = solve_no_presolve(lp, &p);
    int st = ret < 0 ? GLP_UNDEF : glp_mip_status(lp);
    if ((ret == 0 || ret == GLP_ETMLIM) && (st == GLP_OPT || st == GLP_FEAS)) {
      int n = glp_get_num_cols(lp);
      for (int j = 1; j <= n; j++) x[j] = glp_mip_col_val(lp, j);
      *obj = glp_mip_obj_val(lp);
      rc = !milp_feasible(m, x, 1e-6);
    }
  }
  glp_delete_prob(lp);
  milp_quiet_end(q);
  return rc;
}

// ---- checking a solution ----------------------------------------------------------

double milp_objective(const milp *m, const double *x) {
  double v = glp_get_obj_coef(m->lp, 0);
  int n = glp_get_num_cols(m->lp);
  for (int j = 1; j <= n; j++) v += glp_get_obj_coef(m->lp, j) * x[j];
  return v;
}

static int within(double v, int type, double lo, double hi, double tol) {
  if ((type == GLP_LO || type == GLP_DB || type == GLP_FX) && v < lo - tol * (1 + fabs(lo))) return 0;
  if ((type == GLP_UP || type == GLP_DB || type == GLP_FX) && v > hi + tol * (1 + fabs(hi))) return 0;
  return 1;
}

int milp_feasible(const milp *m, const double *x, double tol) {
  glp_prob *lp = m->lp;
  int n = glp_get_num_cols(lp), rows = glp_get_num_rows(lp);
  for (int j = 1; j <= n; j++) {
    if (!within(x[j], glp_get_col_type(lp, j), glp_get_col_lb(lp, j), glp_get_col_ub(lp, j), tol)) return 0;
    if (glp_get_col_kind(lp, j) != GLP_CV && fabs(x[j] - round(x[j])) > 1e-6) return 0;
  }
  int *ind = malloc(((size_t)n + 1) * sizeof *ind);
  double *val = malloc(((size_t)n + 1) * sizeof *val);
  int ok = ind && val;
  for (int i = 1; ok && i <= rows; i++) {
    int len = glp_get_mat_row(lp, i, ind, val);
    double a = 0;
    for (int t = 1; t <= len; t++) a += val[t] * x[ind[t]];
    ok = within(a, glp_get_row_type(lp, i), glp_get_row_lb(lp, i), glp_get_row_ub(lp, i), tol);
  }
  free(ind);
  free(val);
  return ok;
}

// ---- the heuristic incumbent ---------------------------------------------------------

// Boundaries every `len` layers counted back from the last block (a short
// block, if any, comes first), placed by how much time each has to move:
// the last ones, needed first in the backward and made last in the forward,
// on the device; then the host tier; the first ones, with the most time to
// be written and read, on NVMe. The last `keep` layers keep their inner
// activations. `spare` device slots stay free for boundaries in transit and
// the recomputed interior of a block.
static int heur_choice(const milp *m, int len, int spare, int keep, milp_choice *ch) {
  const int L = m->L;
  const double A = m->k->bnd;
  memset(ch->tier, -1, sizeof ch->tier);
  memset(ch->keep, 0, sizeof ch->keep);
  if (keep > L || (keep && !m->keep_ok)) return -1;
  int idx[ENG_PLAN_MAX_LAYERS], n = 0;
  for (int i = L - len; i > 0; i -= len) idx[n++] = i;
  idx[n++] = 0; // descending
  int dev = (int)floor((m->k->cap_dev - keep * m->k->inner) / m->k->bnd_dev) - spare;
  int host = m->tier_ok[ENG_TIER_HOST] ? (int)floor(m->k->cap_host / A) : 0;
  int nvme = m->tier_ok[ENG_TIER_NVME] ? (int)floor(m->k->cap_nvme / A) : 0;
  if (dev < 0) return -1;
  int ndev = n < dev ? n : dev, rest = n - ndev;
  int nnv = rest > host ? rest - host : 0;
  if (nnv > 0 && host > 0) nnv++; // room in host memory for the NVMe staging ring
  if (nnv > rest) nnv = rest;
  if (nnv > nvme || rest - nnv > host) return -1;
  for (int q = 0; q < n; q++)
    ch->tier[idx[q]] = q < ndev ? ENG_TIER_DEVICE : q >= n - nnv ? ENG_TIER_NVME : ENG_TIER_HOST;
  for (int l = L - keep; l < L; l++) ch->keep[l] = 1;
  return 0;
}

// The best of the heuristic's candidates, or 1 when none is feasible. Every
// block length without kept layers; with kept layers (which the program keeps
// only when the device has room, so blocks are short) lengths 1 and 2.
static int heuristic(milp *m, double *x, double *obj, double deadline) {
  const int n = glp_get_num_cols(m->lp);
  double *tmp = malloc(((size_t)n + 1) * sizeof *tmp);
  if (!tmp) return 1;
  const eng_plan_cost *k = m->k;
  int max_keep = m->keep_ok ? (int)floor(fmax(k->cap_dev - k->bnd_dev, 0) / k->inner) : 0;
  int found = 0;
  for (int keep = 0; keep <= max_keep && keep <= m->L; keep++)
    for (int len = 1; len <= (keep ? 2 : m->K) && eng_now() < deadline; len++)
      for (int spare = len; spare <= len + 2; spare++) {
        milp_choice ch;
        double v;
        if (heur_choice(m, len, spare, keep, &ch) || milp_solve_fixed(m, &ch, tmp, &v)) continue;
        if (!found || v < *obj) {
          memcpy(x, tmp, ((size_t)n + 1) * sizeof *x);
          *obj = v;
          found = 1;
        }
        break; // more spare slots only cost device room
      }
  free(tmp);
  return !found;
}

// ---- branch and bound ------------------------------------------------------------------

typedef struct cb_ctx {
  milp *m;
  const uint8_t *klass; // branching class per column (0: not integer)
  const double *heur; // incumbent to hand over (NULL: none)
  int given;
  double gap_target, floor;
  double bound, inc;
  int have_inc;
  int stopped; // terminated on the gap
} cb_ctx;

static double rel_gap(const cb_ctx *c) {
  return (c->inc - c->bound) / fmax(fabs(c->inc), c->floor);
}

static void callback(glp_tree *tree, void *info) {
  cb_ctx *c = info;
  int reason = glp_ios_reason(tree);
  if (reason == GLP_IHEUR && c->heur && !c->given) {
    glp_ios_heur_sol(tree, c->heur);
    c->given = 1;
  }
  glp_prob *lp = glp_ios_get_prob(tree);
  // Branch on the decisions that shape a plan first: kept layers, then
  // tiers, then blocks, then buffer counts; within a class the most
  // fractional, trying the branch that sets it first. Measured against
  // GLPK's own rules on tight instances (12 to 20 layers, a few boundaries of
  // device memory): smaller gaps within the time limit than Driebeck-Tomlin,
  // and unlike hybrid pseudocost no strong-branching start, which ignores the
  // time limit (3.5 s on the 64-layer benchmark instance under a 1 s limit).
  if (reason == GLP_IBRANCH) {
    int n = glp_get_num_cols(lp), pick = 0, pk = 99;
    double pf = -1;
    for (int j = 1; j <= n; j++) {
      if (!glp_ios_can_branch(tree, j)) continue;
      double v = glp_get_col_prim(lp, j), f = 0.5 - fabs(v - floor(v) - 0.5);
      int kl = c->klass[j];
      if (kl < pk || (kl == pk && f > pf)) pick = j, pk = kl, pf = f;
    }
    if (pick) glp_ios_branch_upon(tree, pick, GLP_UP_BRNCH);
  }
  int best = glp_ios_best_node(tree);
  if (best) c->bound = glp_ios_node_bound(tree, best);
  if (glp_mip_status(lp) == GLP_FEAS) {
    c->inc = glp_mip_obj_val(lp);
    c->have_inc = 1;
  }
  if (c->have_inc && best && c->gap_target > 0 && rel_gap(c) <= c->gap_target &&
      (reason == GLP_ISELECT || reason == GLP_IBINGO)) {
    c->stopped = 1;
    glp_ios_terminate(tree);
  }
}

int milp_solve(milp *m, const eng_plan_opts *o, double *x, milp_result *r, eng_err *e) {
  memset(r, 0, sizeof *r);
  const double t0 = eng_now(), deadline = t0 + o->time_limit;
  const int n = glp_get_num_cols(m->lp);
  double *heur = malloc(((size_t)n + 1) * sizeof *heur);
  double *mip = malloc(((size_t)n + 1) * sizeof *mip);
  if (!heur || !mip) {
    free(heur);
    free(mip);
    return eng_err_set(e, ENG_ENOMEM, "plan: cannot allocate the solution vectors");
  }
  double heur_obj = 0;
  int have_heur = !heuristic(m, heur, &heur_obj, deadline);
  int q = milp_quiet_begin();
  int have_mip = 0;
  double mip_obj = 0;
  uint8_t *klass = calloc((size_t)n + 1, 1);
  if (!klass) {
    free(heur);
    free(mip);
    return eng_err_set(e, ENG_ENOMEM, "plan: cannot allocate the branching classes");
  }
  for (int j = 1; j <= n; j++) klass[j] = glp_get_col_kind(m->lp, j) == GLP_CV ? 0 : 4;
  for (int i = 0; i < m->L; i++) {
    if (m->keep[i]) klass[m->keep[i]] = 1;
    klass[m->g[i]] = 2;
    if (m->c[i]) klass[m->c[i]] = 2;
    if (m->n[i]) klass[m->n[i]] = 2;
    for (int e2 = i + 1; e2 <= i + m->K && e2 <= m->L; e2++)
      for (int t = 0; t < MILP_TIERS; t++)
        if (milp_x(m, i, e2, t)) klass[milp_x(m, i, e2, t)] = 3;
  }
  cb_ctx c = {m, klass, have_heur ? heur : NULL, 0, o->mip_gap, 1e-3 * m->lb_step, -DBL_MAX, 0, 0, 0};
  if (!o->heuristic_only) {
    glp_iocp p;
    glp_init_iocp(&p);
    p.msg_lev = GLP_MSG_OFF;
    p.mip_gap = 0; // the callback stops on its own gap (see eng_plan_opts)
    double left = deadline - eng_now();
    p.tm_lim = left > 0.05 ? (int)(left * 1000) : 50;
    p.cb_func = callback;
    p.cb_info = &c;
    // Without the presolver (also: glp_ios_heur_sol needs the original columns).
    int ret = solve_no_presolve(m->lp, &p);
    if (ret >= 0) {
      int st = glp_mip_status(m->lp);
      if (st == GLP_OPT || st == GLP_FEAS) {
        for (int j = 1; j <= n; j++) mip[j] = glp_mip_col_val(m->lp, j);
        mip_obj = milp_objective(m, mip);
        have_mip = milp_feasible(m, mip, 1e-6);
      }
      if (have_mip) {
        r->optimal = ret == 0 && st == GLP_OPT;
        r->bound = r->optimal ? mip_obj : c.bound;
      }
    } else if (glp_get_status(m->lp) == GLP_NOFEAS) {
      r->bound = INFINITY; // not even the relaxation fits
    }
  }
  milp_quiet_end(q);
  if (have_mip && (!have_heur || mip_obj <= heur_obj)) {
    memcpy(x, mip, ((size_t)n + 1) * sizeof *x);
    r->obj = mip_obj;
  } else if (have_heur) {
    memcpy(x, heur, ((size_t)n + 1) * sizeof *x);
    r->obj = heur_obj;
    r->from_heuristic = 1;
    r->optimal = 0;
    if (!have_mip && o->heuristic_only) r->bound = -INFINITY;
  }
  r->found = have_mip || have_heur;
  if (r->found) {
    if (r->optimal) r->bound = r->obj;
    if (isfinite(r->bound))
      r->gap = fmax(0.0, (r->obj - r->bound) / fmax(fabs(r->obj), c.floor));
    else
      r->gap = INFINITY;
  }
  r->seconds = eng_now() - t0;
  free(klass);
  free(heur);
  free(mip);
  return 0;
}
