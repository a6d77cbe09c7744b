// Exactness of the activation program (engine/plan/milp.h): on small
// instances (4 to 8 layers) the GLPK optimum at MIP gap 0 equals the optimum
// found by enumerating every discrete choice (recompute blocks, the tier of
// every materialised boundary, the layers that keep their inner activations)
// and solving, for each, the remaining transfer program written here
// independently: per boundary and window (not the solver's aggregated
// cumulative flows), with a binary per boundary and window for a device
// buffer in use (not the solver's integer counts). Instances are random but
// tight: a few boundaries of device memory, little host memory, links that
// carry a boundary in 0.3 to 3 forward windows. Every plan the program
// returns also passes the simulator's independent check.
#include <float.h>
#include <glpk.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "plan/milp.h"
#include "plan/sim.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double urand(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0;
}

// ---- instances -------------------------------------------------------------------

typedef struct inst {
  eng_plan_cost k;
  eng_plan_opts o;
  int tiers;      // 2: device and host; 3: and NVMe
} inst;

static void make_instance(inst *in, int L, int K, int tiers, int keep) {
  eng_config c = {.arch = ENG_ARCH_QWEN3, .vocab = 256, .d_model = 64, .n_layers = L, .n_heads = 2,
                  .n_kv_heads = 1, .head_dim = 32, .d_ff = 128, .max_pos = 64, .rope_theta = 10000,
                  .rms_eps = 1e-6f, .init_std = 0.02f, .qk_norm = 1};
  eng_profile p = {.gemm_flops = 1e9, .attn_flops = 1e9, .elem_bytes_per_s = 1e10, .h2d = 1e9, .d2h = 1e9,
                   .nvme_read = 1e9, .nvme_write = 1e9, .opt_params_per_s = 1e8, .act_bytes = 2, .weight_bytes = 2,
                   .grad_bytes = 2, .grad_store_bytes = 2, .opt_8bit = 1, .device_bytes = 1e12, .host_bytes = 1e12,
                   .nvme_bytes = 1e12};
  snprintf(p.backend, sizeof p.backend, "cuda");
  eng_err e = {0};
  CHECK_OK(eng_plan_cost_make(&c, 4, 32, 2, &p, &in->k, &e), &e);
  eng_plan_cost *k = &in->k;
  const double A = k->bnd, f = k->t_fwd;
  // Budgets in boundaries, links in forward windows per boundary.
  k->cap_dev = (2.2 + 0.7 * L * urand()) * A;
  k->cap_host = (0.6 + 0.5 * L * urand()) * A;
  k->cap_nvme = tiers == 3 ? (0.6 + 0.5 * L * urand()) * A : 0;
  k->inner = (1.2 + 1.5 * urand()) * A;
  k->d2h = A / ((0.3 + 2.7 * urand()) * f);
  k->h2d = A / ((0.3 + 2.7 * urand()) * f);
  k->nvme_write = A / ((0.5 + 2.5 * urand()) * f);
  k->nvme_read = A / ((0.5 + 2.5 * urand()) * f);
  // Weight and gradient traffic of a fraction of a window, sometimes more.
  k->w_layer = (0.2 + 0.9 * urand()) * k->h2d * k->t_bwd;
  k->g_layer = (0.2 + 0.9 * urand()) * k->d2h * k->t_bwd;
  k->g_head = k->g_layer * 1.5;
  eng_plan_cost_pace(k);
  eng_plan_opts_defaults(&in->o);
  in->o.max_block = K;
  in->o.mip_gap = 0;
  in->o.time_limit = 60;
  in->o.no_nvme = tiers < 3;
  in->o.no_keep = !keep;
  in->tiers = tiers;
}

// ---- the per-boundary transfer program of one discrete choice ------------------------

typedef struct choice {
  int L, K;
  int mat[16], tier[16], end[16], keep[16];
} choice;

typedef struct prog {
  glp_prob *lp;
  int ind[4096];
  double val[4096];
  int n;
} prog;

static void term(prog *p, int col, double v) {
  if (!col || v == 0) return;
  for (int t = 1; t <= p->n; t++)
    if (p->ind[t] == col) {
      p->val[t] += v;
      return;
    }
  p->n++;
  CHECK(p->n < 4096, "row too long");
  p->ind[p->n] = col;
  p->val[p->n] = v;
}

static void row(prog *p, int type, double lo, double hi) {
  int i = glp_add_rows(p->lp, 1);
  glp_set_row_bnds(p->lp, i, type, lo, hi);
  glp_set_mat_row(p->lp, i, p->n, p->ind, p->val);
  p->n = 0;
}

static int col(prog *p, int kind, double lo, double hi, double cost) {
  int j = glp_add_cols(p->lp, 1);
  glp_set_col_kind(p->lp, j, kind);
  if (kind != GLP_BV) glp_set_col_bnds(p->lp, j, hi > lo ? GLP_DB : GLP_FX, lo, hi);
  glp_set_obj_coef(p->lp, j, cost);
  return j;
}

// Exposure no plan avoids (the weights' and gradients' own excess over the
// shortest backward and head windows), computed here from the cost.
static double unavoidable(const eng_plan_cost *k) {
  double u = fmax(0, k->w_layer / k->h2d - k->t_head);
  for (int j = k->L - 1; j >= 0; j--) {
    double in = j >= 1 ? k->w_layer / k->h2d : 0, out = (j == k->L - 1 ? k->g_head : k->g_layer) / k->d2h;
    u += fmax(0, fmax(in, out) - k->t_bwd);
  }
  return u;
}

// Discrete part of the objective: recompute, re-forwards, tie-breakers.
static double discrete_cost(const choice *ch, const eng_plan_cost *k, const milp *m) {
  double v = -unavoidable(k);
  for (int i = 0; i < ch->L; i++) {
    v += ch->keep[i] ? 0 : k->t_refwd;
    if (!ch->mat[i]) continue;
    v += fmax(k->t_fwd, k->w_layer / k->h2d) * (ch->end[i] - i - 1) + m->lam_z;
    v += ch->tier[i] == ENG_TIER_HOST ? m->lam_c : ch->tier[i] == ENG_TIER_NVME ? m->lam_n : 0;
  }
  return v;
}

// Minimum exposure of the choice, or INFINITY when nothing fits.
static double solve_transfers(const choice *ch, const eng_plan_cost *k) {
  const int L = ch->L, W = 2 * L + 1;
  const double A = k->bnd, capD = k->cap_dev / A, capC = k->cap_host / A, I = k->inner / A;
  const double bwI = k->h2d / A, bwO = k->d2h / A, bwW = k->nvme_write / A, bwR = k->nvme_read / A;
  prog p = {.lp = glp_create_prob()};
  int d[16][40] = {{0}}, h[16][40] = {{0}}, q[16][40] = {{0}}, r[16][40] = {{0}}, u[16][40] = {{0}},
      v[16][40] = {{0}}, tau[40];
  for (int w = 0; w < W; w++) tau[w] = col(&p, GLP_CV, 0, 1e6, 1);
  for (int i = 0; i < L; i++) {
    if (!ch->mat[i] || ch->tier[i] == ENG_TIER_DEVICE) continue;
    int need = 2 * L - (ch->end[i] - 1), nv = ch->tier[i] == ENG_TIER_NVME;
    for (int w = i; w < L; w++) d[i][w] = col(&p, GLP_CV, 0, 1, 0);
    for (int w = L; w < need; w++) h[i][w] = col(&p, GLP_CV, 0, 1, 0);
    for (int w = i + 1; w < L; w++) u[i][w] = col(&p, GLP_BV, 0, 1, 0);
    for (int w = L; w <= 2 * L - i; w++) v[i][w] = col(&p, GLP_BV, 0, 1, 0);
    if (nv) {
      for (int w = 1; w <= L; w++) q[i][w] = col(&p, GLP_CV, 0, 1, 0);
      for (int w = L + 1; w < W; w++) r[i][w] = col(&p, GLP_CV, 0, 1, 0);
    }
    // Every byte moves once each way (and to NVMe and back).
    for (int w = 0; w < W; w++) term(&p, d[i][w], 1);
    row(&p, GLP_FX, 1, 1);
    for (int w = 0; w < W; w++) term(&p, h[i][w], 1);
    row(&p, GLP_FX, 1, 1);
    if (nv) {
      for (int w = 0; w < W; w++) term(&p, q[i][w], 1);
      row(&p, GLP_FX, 1, 1);
      for (int w = 0; w < W; w++) term(&p, r[i][w], 1);
      row(&p, GLP_FX, 1, 1);
    }
    for (int w = 0; w < W; w++) {
      // Device buffer in transit: not all out by the end of the previous window.
      if (u[i][w]) {
        for (int x = 0; x < w; x++) term(&p, d[i][x], 1);
        term(&p, u[i][w], 1);
        row(&p, GLP_LO, 1, 0);
      }
      // Device buffer on the way back: taken when the copy-in starts.
      if (v[i][w]) {
        for (int x = 0; x <= w; x++) term(&p, h[i][x], 1);
        term(&p, v[i][w], -1);
        row(&p, GLP_UP, 0, 0);
      }
      if (nv) { // written after copied out, copied in after read, a window apart
        for (int x = 0; x <= w; x++) term(&p, q[i][x], 1);
        for (int x = 0; x < w; x++) term(&p, d[i][x], -1);
        row(&p, GLP_UP, 0, 0);
        for (int x = 0; x <= w; x++) term(&p, h[i][x], 1);
        for (int x = 0; x < w; x++) term(&p, r[i][x], -1);
        row(&p, GLP_UP, 0, 0);
      }
    }
  }
  for (int w = 0; w < W; w++) {
    int fwd = w < L, j = w <= L ? L - 1 : 2 * L - w;
    int upto = fwd ? w : j;
    double dev = 0;
    for (int i = 0; i <= upto && i < L; i++) {
      dev += ch->mat[i] && ch->tier[i] == ENG_TIER_DEVICE;
      dev += ch->keep[i] * I;
    }
    for (int i = 0; i < L; i++) {
      term(&p, u[i][w], 1);
      if (!fwd && i <= j) term(&p, v[i][w], 1);
    }
    if (w > L) // the recomputed interior of the block around j
      for (int s = 0; s < j; s++)
        if (ch->mat[s] && ch->end[s] > j) dev += j - s;
    row(&p, GLP_UP, 0, capD - dev);
    // Host: its tier, plus the NVMe ring (bytes in, not yet out).
    double host = 0;
    for (int i = 0; i < L; i++) host += ch->mat[i] && ch->tier[i] == ENG_TIER_HOST;
    for (int i = 0; i < L; i++) {
      if (!ch->mat[i] || ch->tier[i] != ENG_TIER_NVME) continue;
      for (int x = 0; x <= w; x++) term(&p, w <= L ? d[i][x] : r[i][x], 1);
      for (int x = 0; x < w; x++) term(&p, w <= L ? q[i][x] : h[i][x], -1);
    }
    row(&p, GLP_UP, 0, capC - host);
    // Links: bytes <= rate * (compute + tau).
    double dur;
    if (fwd) dur = k->d_fwd[w];
    else if (w == L) dur = k->t_head;
    else {
      int rec = 0;
      for (int s = 0; s < j; s++)
        if (ch->mat[s] && ch->end[s] == j + 1) rec = j - s;
      // The recompute: each layer its forward or its weights' copy, whichever
      // is longer; copy-ins from the backward's start, with one layer's weights.
      double bwd = k->t_bwd + (ch->keep[j] ? 0 : k->t_refwd);
      dur = bwd + rec * fmax(k->t_fwd, k->w_layer / k->h2d);
      for (int i = 0; i < L; i++) term(&p, h[i][w], 1);
      term(&p, tau[w], -bwI);
      row(&p, GLP_UP, 0, bwI * bwd - (j >= 1 ? k->w_layer / A : 0));
      term(&p, tau[w], -bwO);
      row(&p, GLP_UP, 0, bwO * dur - (j == L - 1 ? k->g_head : k->g_layer) / A);
      for (int i = 0; i < L; i++) term(&p, r[i][w], 1);
      term(&p, tau[w], -bwR);
      row(&p, GLP_UP, 0, bwR * dur);
      continue;
    }
    if (w == L) {
      for (int i = 0; i < L; i++) term(&p, h[i][w], 1);
      term(&p, tau[w], -bwI);
      row(&p, GLP_UP, 0, bwI * dur - k->w_layer / A);
    }
    if (fwd) {
      for (int i = 0; i < L; i++) term(&p, d[i][w], 1);
      term(&p, tau[w], -bwO);
      row(&p, GLP_UP, 0, bwO * dur);
    }
    for (int i = 0; i < L; i++) term(&p, q[i][w], 1);
    term(&p, tau[w], -bwW);
    row(&p, GLP_UP, 0, bwW * dur);
  }
  // Without GLPK's MIP presolver, which can return a point violating a row.
  glp_smcp sp;
  glp_init_smcp(&sp);
  sp.msg_lev = GLP_MSG_OFF;
  double obj = INFINITY;
  if (glp_simplex(p.lp, &sp) == 0 && glp_get_status(p.lp) == GLP_OPT) {
    glp_iocp io;
    glp_init_iocp(&io);
    io.msg_lev = GLP_MSG_OFF;
    io.mip_gap = 0;
    int ret = glp_intopt(p.lp, &io);
    CHECK(ret == 0, "transfer program: glp_intopt returned %d", ret);
    if (glp_mip_status(p.lp) == GLP_OPT) obj = glp_mip_obj_val(p.lp);
  }
  glp_delete_prob(p.lp);
  return obj;
}

// ---- enumeration ------------------------------------------------------------------------

typedef struct search {
  const eng_plan_cost *k;
  const milp *m;
  const inst *in;
  choice ch;
  double best;
  long solved, pruned;
} search;

// Capacities no transfer schedule can rescue: the device at the head (every
// device-tier boundary and kept layer, and the first backward block's start),
// the host tier, NVMe.
static int static_fits(const choice *ch, const eng_plan_cost *k) {
  const double A = k->bnd;
  double dev = 0, host = 0, nv = 0, keep = 0;
  for (int i = 0; i < ch->L; i++) {
    if (ch->mat[i]) {
      dev += ch->tier[i] == ENG_TIER_DEVICE;
      host += ch->tier[i] == ENG_TIER_HOST;
      nv += ch->tier[i] == ENG_TIER_NVME;
    }
    keep += ch->keep[i];
  }
  return (fmax(dev, 1) + keep * k->inner / A) * A <= k->cap_dev * (1 + 1e-12) && host * A <= k->cap_host &&
         nv * A <= k->cap_nvme;
}

static void visit_choice(search *s) {
  if (!static_fits(&s->ch, s->k)) return;
  double base = discrete_cost(&s->ch, s->k, s->m);
  if (base >= s->best - 1e-12) { // exposure is never negative
    s->pruned++;
    return;
  }
  double x = solve_transfers(&s->ch, s->k);
  s->solved++;
  if (base + x < s->best) s->best = base + x;
}

static void enum_keep(search *s, int l) {
  if (l == s->ch.L) {
    visit_choice(s);
    return;
  }
  s->ch.keep[l] = 0;
  enum_keep(s, l + 1);
  if (!s->in->o.no_keep) {
    s->ch.keep[l] = 1;
    enum_keep(s, l + 1);
    s->ch.keep[l] = 0;
  }
}

static void enum_tiers(search *s, int i) {
  if (i == s->ch.L) {
    enum_keep(s, 0);
    return;
  }
  if (!s->ch.mat[i]) {
    enum_tiers(s, i + 1);
    return;
  }
  for (int t = 0; t < s->in->tiers; t++) {
    s->ch.tier[i] = t;
    enum_tiers(s, i + 1);
  }
}

// Paths 0 -> L with blocks of at most K layers.
static void enum_paths(search *s, int at) {
  if (at == s->ch.L) {
    enum_tiers(s, 0);
    return;
  }
  s->ch.mat[at] = 1;
  for (int e = at + 1; e <= at + s->ch.K && e <= s->ch.L; e++) {
    s->ch.end[at] = e;
    for (int i = at + 1; i < e; i++) s->ch.mat[i] = 0;
    enum_paths(s, e);
  }
}

// What the optimal plans used, so that the instances are known to exercise
// every part of the program.
static struct {
  int feasible, host, nvme, keep, recompute, exposed;
} seen;

static void note(const eng_plan *p) {
  seen.feasible++;
  int h = 0, n = 0, k = 0, rec = 0;
  double ex = 0;
  for (int i = 0; i < p->n_layers; i++) {
    h |= p->bnd[i].materialised && p->bnd[i].tier == ENG_TIER_HOST;
    n |= p->bnd[i].materialised && p->bnd[i].tier == ENG_TIER_NVME;
    k |= p->keep_inner[i];
    rec |= !p->bnd[i].materialised;
  }
  for (int w = 0; w <= 2 * p->n_layers; w++) ex += p->win[w].t_exposed;
  seen.host += h, seen.nvme += n, seen.keep += k, seen.recompute += rec, seen.exposed += ex > 0;
}

static void run(int L, int K, int tiers, int keep, int seeds) {
  for (int seed = 0; seed < seeds; seed++) {
    inst in;
    make_instance(&in, L, K, tiers, keep);
    milp m;
    eng_err e = {0};
    CHECK_OK(milp_build(&m, &in.k, &in.o, 0, &e), &e);
    int n = glp_get_num_cols(m.lp);
    double *x = malloc(((size_t)n + 1) * sizeof *x);
    milp_result r;
    CHECK_OK(milp_solve(&m, &in.o, x, &r, &e), &e);
    search s = {.k = &in.k, .m = &m, .in = &in, .ch = {.L = L, .K = m.K}, .best = INFINITY};
    int q = glp_term_out(GLP_OFF);
    enum_paths(&s, 0);
    glp_term_out(q);
    printf("L=%d K=%d tiers=%d keep=%d seed %d: program %s %.9g (%s, %.2f s); enumeration %.9g (%ld programs, %ld pruned)\n",
           L, K, tiers, keep, seed, r.found ? "optimum" : "infeasible", r.found ? r.obj : NAN,
           r.optimal ? "proven" : "not proven", r.seconds, s.best, s.solved, s.pruned);
    CHECK(r.found == isfinite(s.best), "the program and the enumeration disagree on feasibility");
    if (r.found) {
      CHECK(r.optimal, "the program did not prove its optimum");
      CHECK(fabs(r.obj - s.best) <= 1e-7 * (1 + fabs(s.best)), "program optimum %.12g != enumeration %.12g", r.obj,
            s.best);
      eng_plan plan;
      CHECK_OK(milp_extract(&m, x, &plan, &e), &e);
      CHECK_OK(eng_plan_check(&plan, &in.k, &e), &e);
      eng_plan_sim sim;
      CHECK_OK(eng_plan_simulate(&plan, &in.k, &sim, &e), &e);
      printf("  replay %.6g s, window model %.6g s\n", sim.step_time, plan.model_step_time);
      CHECK(fabs(sim.step_time / plan.model_step_time - 1) < 0.05, "the replay and the program's model disagree");
      eng_plan_sim_free(&sim);
      note(&plan);
      eng_plan_free(&plan);
    }
    free(x);
    milp_free(&m);
  }
}

int main(void) {
  run(4, 4, 3, 1, 12); // every tier, kept layers, blocks of any length
  run(5, 3, 3, 1, 8);
  run(6, 2, 3, 0, 8);
  run(8, 2, 2, 0, 6); // device and host only, on 8 layers
  run(8, 3, 3, 0, 2); // every tier on 8 layers
  printf("optimal plans: %d; using host %d, NVMe %d, kept layers %d, recompute %d, exposed transfer %d\n", seen.feasible,
         seen.host, seen.nvme, seen.keep, seen.recompute, seen.exposed);
  CHECK(seen.feasible >= 20 && seen.host && seen.nvme && seen.keep && seen.recompute && seen.exposed,
        "the instances do not exercise every part of the program");
  printf("ok\n");
  return 0;
}
