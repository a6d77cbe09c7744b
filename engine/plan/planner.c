// The planner's search over micro-batch splits and batches (plan/planner.h).
#include "plan/planner.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "plan/cost.h"
#include "plan/milp.h"
#include "plan/sim.h"


void eng_plan_opts_defaults(eng_plan_opts *o) {
  memset(o, 0, sizeof *o);
  o->time_limit = 5.0;
  o->mip_gap = 0.01;
  o->max_block = 8;
}

const char *eng_plan_policy_name(eng_plan_policy pol) {
  switch (pol) {
  case ENG_POLICY_EVERY_K: return "every-k";
  case ENG_POLICY_ALL_HOST: return "all-host";
  case ENG_POLICY_NONE: return "no-checkpoints";
  }
  return "?";
}

static double gib(double b) { return b / 1073741824.0; }

// The budgets that no placement can help: the training state in host memory,
// and the device's fixed needs at the smallest micro-batch.
static int refuse_fixed(const eng_plan_cost *k, eng_err *e) {
  if (k->cap_host < 0 && k->host_state > k->host_budget)
    return eng_err_set(e, ENG_ECAP,
                       "plan: host memory: the training state needs %.0f bytes (%.2f GiB: fp32 master %.2f, optimizer "
                       "state %.2f, gradient store %.2f, pinned working copy %.2f, POET-X state %.2f), the budget is %.0f "
                       "bytes: short by %.0f bytes (%.2f GiB)",
                       k->host_state, gib(k->host_state), gib(k->host_master), gib(k->host_opt), gib(k->host_grad),
                       gib(k->host_pinned), gib(k->host_poet), k->host_budget, k->host_state - k->host_budget,
                       gib(k->host_state - k->host_budget));
  if (k->cap_dev < 0 && k->dev_fixed > k->dev_budget)
    return eng_err_set(e, ENG_ECAP,
                       "plan: device memory: two weight slots, two gradient slots, the two working boundaries and one "
                       "micro-batch of %d sequences need %.0f bytes (%.2f GiB), the budget is %.0f bytes: short by %.0f "
                       "bytes (%.2f GiB)",
                       k->micro_batch, k->dev_fixed, gib(k->dev_fixed), k->dev_budget, k->dev_fixed - k->dev_budget,
                       gib(k->dev_fixed - k->dev_budget));
  return 0;
}

// Names how far an activation placement is from fitting: the elastic program
// at the smallest micro-batch, minimising the bytes missing in the tiers.
static int refuse_activations(const eng_plan_cost *k, const eng_plan_opts *o, eng_err *e) {
  milp m;
  int rc = milp_build(&m, k, o, 1, e);
  if (rc) return rc;
  eng_plan_opts so = *o;
  so.time_limit = fmin(o->time_limit, 2.0);
  so.mip_gap = 0;
  int n = glp_get_num_cols(m.lp);
  double *x = malloc(((size_t)n + 1) * sizeof *x);
  milp_result r;
  if (!x || milp_solve(&m, &so, x, &r, e) || !r.found) {
    free(x);
    milp_free(&m);
    return eng_err_set(e, ENG_ECAP, "plan: the activations of batch %d x %d fit no placement within the budgets", k->batch,
                       k->seq_len);
  }
  const char *tier[3] = {"device", "host", "NVMe"};
  const double cap[3] = {k->cap_dev, k->cap_host, k->cap_nvme};
  char msg[400];
  int len = snprintf(msg, sizeof msg, "plan: batch %d x %d does not fit:", k->batch, k->seq_len);
  // Shortfalls under a few token rows are the staging ring's rounding margin.
  const double rows = 4.0 * k->d_model * k->act_bytes;
  for (int t = 0; t < 3; t++) {
    double s = m.slack[t] ? x[m.slack[t]] * k->bnd : 0;
    if (s > rows && len < (int)sizeof msg)
      len += snprintf(msg + len, sizeof msg - (size_t)len,
                      " %s activation memory short by %.0f bytes (%.2f GiB; %.2f GiB available for activations);",
                      tier[t], s, gib(s), gib(fmax(cap[t], 0)));
  }
  free(x);
  milp_free(&m);
  return eng_err_set(e, ENG_ECAP, "%s boundaries are %.0f bytes each", msg, k->bnd);
}

// Solves one split: the program, the plan, its replay. *found = 0 when infeasible.
static int solve_split(const eng_plan_cost *k, const eng_plan_opts *o, double limit, eng_plan *out, int *found,
                       eng_err *e) {
  *found = 0;
  milp m;
  int rc = milp_build(&m, k, o, 0, e);
  if (rc) return rc;
  eng_plan_opts so = *o;
  so.time_limit = limit;
  int n = glp_get_num_cols(m.lp);
  double *x = malloc(((size_t)n + 1) * sizeof *x);
  milp_result r;
  if (!x) rc = eng_err_set(e, ENG_ENOMEM, "plan: out of memory");
  else rc = milp_solve(&m, &so, x, &r, e);
  if (!rc && r.found) rc = milp_extract(&m, x, out, e);
  free(x);
  milp_free(&m);
  if (rc || !r.found) return rc;
  snprintf(out->method, sizeof out->method, "%s", r.from_heuristic ? "heuristic" : "milp");
  out->optimal = r.optimal;
  out->gap = r.gap;
  out->bound = r.bound;
  out->objective = r.obj;
  out->solve_time = r.seconds;
  eng_plan_sim sim;
  if ((rc = eng_plan_check(out, k, e))) {
    eng_err_prefix(e, "plan: internal error, the program's plan fails the simulator's check: ");
  } else if (!(rc = eng_plan_simulate(out, k, &sim, e))) {
    eng_plan_sim_apply(out, &sim);
    eng_plan_sim_free(&sim);
    *found = 1;
    return 0;
  }
  eng_plan_free(out);
  return rc;
}

// No plan of this split beats this: the window model's bound plus the
// re-forward of every layer that cannot keep its inner activations (during
// the head the device holds them and at least one boundary).
static double split_bound(const eng_plan_cost *k, const eng_plan_opts *o) {
  double kept = o->no_keep || k->inner <= 0 ? 0 : floor(fmax(k->cap_dev - k->bnd_dev, 0) / k->inner);
  return milp_lower_bound(k) + k->t_refwd * fmax(0.0, k->L - kept);
}

typedef struct split {
  int mb;
  double lb;
} split;

static int by_lb(const void *a, const void *b) {
  const split *x = a, *y = b;
  return x->lb < y->lb ? -1 : x->lb > y->lb ? 1 : x->mb > y->mb ? -1 : x->mb < y->mb;
}

// The splits of the batch whose fixed needs fit, best lower bound first
// (none when not even the smallest fits).
static int splits(const eng_config *c, int batch, int seq_len, const eng_profile *p, const eng_plan_opts *o, split *out,
                  int *n, eng_err *e) {
  *n = 0;
  if (o->micro_batch && (o->micro_batch < 1 || batch % o->micro_batch))
    return eng_err_set(e, ENG_EINVAL, "plan: micro-batch %d does not divide batch %d", o->micro_batch, batch);
  for (int mb = 1; mb <= batch; mb++) {
    if (batch % mb || (o->micro_batch && mb != o->micro_batch)) continue;
    eng_plan_cost k;
    int rc = eng_plan_cost_make(c, batch, seq_len, mb, p, &k, e);
    if (rc) return rc;
    if (k.cap_host < 0) return refuse_fixed(&k, e); // the training state does not depend on the split
    if (k.cap_dev < 0) break; // larger splits need more device workspace still
    out[(*n)++] = (split){mb, split_bound(&k, o)};
  }
  qsort(out, (size_t)*n, sizeof *out, by_lb);
  return 0;
}

static int plan_batch(const eng_config *c, const char *model_name, int batch, int seq_len, const eng_profile *p,
                      const eng_plan_opts *o, eng_plan *out, eng_err *e) {
  // Room after the last solve for the plan's extraction, check and replay.
  const double t0 = eng_now(), deadline = t0 + o->time_limit - fmin(0.1, 0.05 * o->time_limit);
  // What no split can hold (the training state, the device's fixed needs
  // at the smallest micro-batch) is refused before any solve.
  eng_plan_cost k0;
  int rc = eng_plan_cost_make(c, batch, seq_len, o->micro_batch ? o->micro_batch : 1, p, &k0, e);
  if (!rc) rc = refuse_fixed(&k0, e);
  if (rc) return rc;
  split *sp = malloc((size_t)batch * sizeof *sp);
  if (!sp) return eng_err_set(e, ENG_ENOMEM, "plan: out of memory");
  int n;
  rc = splits(c, batch, seq_len, p, o, sp, &n, e);
  int have = 0;
  for (int i = 0; !rc && i < n; i++) {
    // A split whose bound is within 0.5% of the best plan's time cannot pay for its solve.
    if (have && sp[i].lb >= out->step_time * 0.995) break;
    double left = deadline - eng_now();
    if (have && left < 0.1) break;
    // The first split gets most of the time, unless no other could compete.
    double limit = !have && i + 1 < n && sp[i + 1].lb < sp[i].lb * 1.005 ? 0.7 * left : left;
    eng_plan_cost k;
    eng_plan cand;
    int found;
    if ((rc = eng_plan_cost_make(c, batch, seq_len, sp[i].mb, p, &k, e))) break;
    if ((rc = solve_split(&k, o, fmax(limit, 0.05), &cand, &found, e))) break;
    if (!found) continue;
    if (!have || cand.step_time < out->step_time) {
      if (have) eng_plan_free(out);
      *out = cand;
      have = 1;
    } else {
      eng_plan_free(&cand);
    }
  }
  if (!rc && !have) {
    // Measure the shortfall at the smallest split: it holds the least workspace.
    int mb = o->micro_batch ? o->micro_batch : 1;
    eng_plan_cost k;
    rc = eng_plan_cost_make(c, batch, seq_len, mb, p, &k, e);
    if (!rc) rc = refuse_fixed(&k, e);
    if (!rc) rc = refuse_activations(&k, o, e);
  }
  free(sp);
  if (rc && have) eng_plan_free(out);
  if (rc) return rc;
  snprintf(out->model, sizeof out->model, "%s", model_name ? model_name : "model");
  snprintf(out->profile, sizeof out->profile, "%s", p->name);
  out->solve_time = eng_now() - t0;
  return 0;
}

// Whether some plan of `batch` fits: the heuristic first, then the program
// itself briefly. Every budget grows with the batch, so this is monotone.
static int fits(const eng_config *c, int batch, int seq_len, const eng_profile *p, const eng_plan_opts *o, int *ok,
                eng_err *e) {
  *ok = 0;
  eng_plan_cost k;
  int rc = eng_plan_cost_make(c, batch, seq_len, 1, p, &k, e);
  if (rc) return rc;
  if (k.cap_host < 0 || k.cap_dev < 0) return 0;
  milp m;
  if ((rc = milp_build(&m, &k, o, 0, e))) return rc;
  int n = glp_get_num_cols(m.lp);
  double *x = malloc(((size_t)n + 1) * sizeof *x);
  milp_result r = {0};
  eng_plan_opts so = *o;
  so.heuristic_only = 1;
  so.time_limit = 1.0;
  if (!x) rc = eng_err_set(e, ENG_ENOMEM, "plan: out of memory");
  else if (!(rc = milp_solve(&m, &so, x, &r, e)) && !r.found) {
    so.heuristic_only = 0;
    so.time_limit = fmin(o->time_limit, 1.0);
    so.mip_gap = 1.0; // any feasible plan answers the question
    rc = milp_solve(&m, &so, x, &r, e);
  }
  free(x);
  milp_free(&m);
  *ok = !rc && r.found;
  return rc;
}

int eng_plan_max_batch(const eng_config *c, int seq_len, const eng_profile *p, const eng_plan_opts *o, int limit,
                       int *batch, eng_err *e) {
  eng_plan_opts d;
  if (!o) {
    eng_plan_opts_defaults(&d);
    o = &d;
  }
  *batch = 0;
  int ok, rc = fits(c, 1, seq_len, p, o, &ok, e);
  if (rc) return rc;
  if (!ok) {
    eng_plan tmp;
    rc = plan_batch(c, NULL, 1, seq_len, p, o, &tmp, e); // names the failing budget
    if (!rc) {
      eng_plan_free(&tmp);
      rc = eng_err_set(e, ENG_ECAP, "plan: batch 1 fits only with the full search");
    }
    return rc;
  }
  int lo = 1, hi = 2;
  while (hi <= limit) { // lo fits; find a hi that does not
    if ((rc = fits(c, hi, seq_len, p, o, &ok, e))) return rc;
    if (!ok) break;
    lo = hi;
    hi *= 2;
  }
  if (hi > limit) hi = limit + 1;
  while (hi - lo > 1) {
    int mid = lo + (hi - lo) / 2;
    if ((rc = fits(c, mid, seq_len, p, o, &ok, e))) return rc;
    if (ok) lo = mid;
    else hi = mid;
  }
  *batch = lo;
  return 0;
}

int eng_plan_make(const eng_config *c, const char *model_name, int batch, int seq_len, const eng_profile *p,
                  const eng_plan_opts *o, eng_plan *out, eng_err *e) {
  eng_plan_opts d;
  if (!o) {
    eng_plan_opts_defaults(&d);
    o = &d;
  }
  memset(out, 0, sizeof *out);
  int rc = eng_config_validate(c, "plan", e);
  if (rc) return rc;
  if (batch < 0 || seq_len < 1) return eng_err_set(e, ENG_EINVAL, "plan: batch %d, sequence length %d", batch, seq_len);
  if (batch == 0 && (rc = eng_plan_max_batch(c, seq_len, p, o, 1 << 16, &batch, e))) return rc;
  return plan_batch(c, model_name, batch, seq_len, p, o, out, e);
}

int eng_plan_baseline(const eng_config *c, const char *model_name, int batch, int seq_len, const eng_profile *p,
                      eng_plan_policy pol, int kevery, int micro_batch, eng_plan *out, eng_err *e) {
  const int L = c->n_layers;
  if (pol == ENG_POLICY_EVERY_K && kevery < 1)
    return eng_err_set(e, ENG_EINVAL, "plan: checkpoint every %d layers", kevery);
  eng_plan_opts o;
  eng_plan_opts_defaults(&o);
  o.max_block = pol == ENG_POLICY_EVERY_K ? kevery : pol == ENG_POLICY_NONE ? L : 1;
  milp_choice ch;
  memset(ch.tier, -1, sizeof ch.tier);
  memset(ch.keep, 0, sizeof ch.keep);
  for (int i = 0; i < L; i++) {
    if (pol == ENG_POLICY_EVERY_K && i % kevery == 0) ch.tier[i] = ENG_TIER_DEVICE;
    if (pol == ENG_POLICY_ALL_HOST) ch.tier[i] = ENG_TIER_HOST;
  }
  ch.tier[0] = pol == ENG_POLICY_ALL_HOST ? ENG_TIER_HOST : ENG_TIER_DEVICE;
  int have = 0, rc = 0;
  memset(out, 0, sizeof *out);
  for (int mb = 1; mb <= batch && !rc; mb++) {
    if (batch % mb || (micro_batch && mb != micro_batch)) continue;
    eng_plan_cost k;
    if ((rc = eng_plan_cost_make(c, batch, seq_len, mb, p, &k, e))) break;
    if (k.cap_dev < 0 || k.cap_host < 0) break;
    milp m;
    if ((rc = milp_build(&m, &k, &o, 0, e))) break;
    int n = glp_get_num_cols(m.lp);
    double *x = malloc(((size_t)n + 1) * sizeof *x), obj;
    eng_plan cand;
    int ok = 0;
    if (!x) rc = eng_err_set(e, ENG_ENOMEM, "plan: out of memory");
    else if (!milp_solve_fixed(&m, &ch, x, &obj) && !(rc = milp_extract(&m, x, &cand, e))) ok = 1;
    free(x);
    milp_free(&m);
    if (!ok) continue;
    eng_plan_sim sim;
    if ((rc = eng_plan_simulate(&cand, &k, &sim, e))) {
      eng_plan_free(&cand);
      break;
    }
    eng_plan_sim_apply(&cand, &sim);
    eng_plan_sim_free(&sim);
    cand.objective = obj;
    cand.gap = cand.bound = NAN; // a fixed policy: nothing was searched
    if (pol == ENG_POLICY_EVERY_K) snprintf(cand.method, sizeof cand.method, "every-%d", kevery);
    else snprintf(cand.method, sizeof cand.method, "%s", eng_plan_policy_name(pol));
    if (!have || cand.step_time < out->step_time) {
      if (have) eng_plan_free(out);
      *out = cand;
      have = 1;
    } else {
      eng_plan_free(&cand);
    }
  }
  if (rc) {
    if (have) eng_plan_free(out);
    return rc;
  }
  if (!have)
    return eng_err_set(e, ENG_ECAP, "plan: the %s policy does not fit batch %d x %d within the budgets",
                       eng_plan_policy_name(pol), batch, seq_len);
  snprintf(out->model, sizeof out->model, "%s", model_name ? model_name : "model");
  snprintf(out->profile, sizeof out->profile, "%s", p->name);
  return 0;
}

void eng_plan_thread_release(void) { glp_free_env(); }
