#include "sizing.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/layout.h"

enum { CANDIDATES = 12 };

// The nearest shape to N_opt for C that the planner fits.
static int fit_shape(planning *p, const eng_spec *s, const eng_scaling_fit *fit, double C, sizing *z, eng_plan *plan,
                     char **svg, eng_err *e) {
  eng_scaling_optimal(fit, C, &z->params_opt, &z->tokens_opt);
  z->flops = C;
  z->loss_opt = eng_scaling_loss(fit, z->params_opt, z->tokens_opt);
  z->n_skipped = 0;
  eng_qwen3_shape c[CANDIDATES];
  int n = eng_qwen3_nearest(z->params_opt, s->config.vocab, c, CANDIDATES);
  for (int i = 0; i < n && fabs(log(c[i].params / z->params_opt)) <= log(2.0); i++) {
    eng_spec t = *s;
    t.config = c[i].config;
    eng_err pe = {0};
    int rc = planning_make(p, &t, plan, NULL, svg, &pe);
    if (rc == ENG_ECAP) {
      if (z->n_skipped < SIZING_MAX_SKIPPED)
        snprintf(z->skipped[z->n_skipped++], sizeof z->skipped[0], "%.47s (%.3g parameters): %.120s", c[i].name,
                 c[i].params, pe.msg);
      continue;
    }
    if (rc) {
      *e = pe;
      return eng_err_prefix(e, "sizing %s: ", c[i].name);
    }
    z->shape = c[i];
    z->tokens = C / (6.0 * c[i].params);
    z->steps = (int64_t)ceil(z->tokens / ((double)s->batch * s->seq_len));
    z->wall_s = plan->tokens_per_s > 0 ? z->tokens / plan->tokens_per_s : 0;
    z->loss = eng_scaling_loss(fit, c[i].params, z->tokens);
    return 0;
  }
  return eng_err_set(e, ENG_ECAP, "none of the Qwen3 shapes nearest to %.3g parameters (within 2x) fits this machine "
                     "at batch %d x %d tokens (the nearest: %s)", z->params_opt, s->batch, s->seq_len,
                     z->n_skipped ? z->skipped[0] : "none in this family, which ends at hidden 8192");
}

int sizing_make(planning *p, const eng_spec *s, const eng_scaling_fit *fit, double flops, double gpu_hours,
                sizing *out, eng_plan *plan, char **svg, eng_err *e) {
  memset(out, 0, sizeof *out);
  if (flops > 0) return fit_shape(p, s, fit, flops, out, plan, svg, e);
  // GPU hours: the budget is what a shape's plan computes in that time
  // (6·params per token at its tokens/s), so start from the job's own model
  // and move to the shape its budget picks until the shape stays put.
  const double secs = gpu_hours * 3600.0;
  int rc = planning_make(p, s, plan, NULL, NULL, e);
  if (rc) return rc;
  eng_layout lo;
  eng_layout_init(&lo, &s->config);
  double C = secs * 6.0 * (double)lo.total_numel * plan->tokens_per_s;
  eng_plan_free(plan);
  char prev[48] = "";
  for (int it = 0; it < 6; it++) {
    if (svg && *svg) {
      free(*svg);
      *svg = NULL;
    }
    if ((rc = fit_shape(p, s, fit, C, out, plan, svg, e))) return rc;
    double next = secs * 6.0 * out->shape.params * plan->tokens_per_s;
    if (!strcmp(prev, out->shape.name) || fabs(next / C - 1) < 0.01) break;
    snprintf(prev, sizeof prev, "%s", out->shape.name);
    C = next;
    eng_plan_free(plan);
  }
  return 0;
}
