// The plan as a table for a person: a line per boundary, then the predictions.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "plan/plan.h"
#include "plan/strbuf.h"

// "F3", "H", "B7": the name of window w.
static void win_name(const eng_plan *p, int w, char *out, size_t n) {
  const eng_plan_win *x = &p->win[w];
  if (x->kind == ENG_WIN_HEAD) snprintf(out, n, "H");
  else snprintf(out, n, "%c%d", x->kind == ENG_WIN_FWD ? 'F' : 'B', x->layer);
}

// The windows boundary i uses on lane l, as "F3-F5" (first and last).
static void lane_windows(const eng_plan *p, int i, eng_lane l, char *out, size_t n) {
  int lo = -1, hi = -1;
  for (int t = 0; t < p->n_xfer; t++) {
    const eng_plan_xfer *x = &p->xfer[t];
    if (x->boundary != i || x->lane != l) continue;
    if (lo < 0 || x->window < lo) lo = x->window;
    if (x->window > hi) hi = x->window;
  }
  if (lo < 0) {
    snprintf(out, n, "-");
    return;
  }
  char a[16], b[16];
  win_name(p, lo, a, sizeof a);
  win_name(p, hi, b, sizeof b);
  if (lo == hi) snprintf(out, n, "%s", a);
  else snprintf(out, n, "%s-%s", a, b);
}

static double gib(double b) { return b / 1073741824.0; }

int eng_plan_table(const eng_plan *p, char **out, eng_err *e) {
  const int L = p->n_layers;
  eng_sb b = {0};
  eng_sb_put(&b, "plan for %s on %s: batch %d x %d tokens, %d micro-batches of %d; boundary %.3f GiB\n", p->model,
             p->profile, p->batch, p->seq_len, p->n_micro, p->micro_batch, gib((double)p->bnd_bytes));
  eng_sb_put(&b, "%-9s %-12s %-7s %-9s %-11s %-11s %-11s %-11s %s\n", "boundary", "kept", "tier", "block", "copy-out",
             "nvme-write", "nvme-read", "copy-in", "layer keeps inner acts");
  for (int i = 0; i <= L; i++) {
    const eng_plan_bnd *x = &p->bnd[i];
    char block[24] = "-", lanes[4][40];
    const eng_lane order[4] = {ENG_LANE_D2H, ENG_LANE_NVME_W, ENG_LANE_NVME_R, ENG_LANE_H2D};
    for (int q = 0; q < 4; q++) lane_windows(p, i, order[q], lanes[q], sizeof lanes[q]);
    if (x->materialised) snprintf(block, sizeof block, "%d-%d", i, x->block_end);
    const char *kept = i == L ? "head input" : x->materialised ? "yes" : "recompute";
    eng_sb_put(&b, "%-9d %-12s %-7s %-9s %-11s %-11s %-11s %-11s %s\n", i, kept,
               x->materialised ? eng_tier_name(x->tier) : "-", block, lanes[0], lanes[1], lanes[2], lanes[3],
               i < L ? (p->keep_inner[i] ? "yes" : "no") : "");
  }
  int mat[3] = {0};
  for (int i = 0; i < L; i++)
    if (p->bnd[i].materialised) mat[p->bnd[i].tier]++;
  eng_sb_put(&b, "materialised: %d on the device, %d in host memory, %d on NVMe; %d recomputed\n", mat[0], mat[1],
             mat[2], L - mat[0] - mat[1] - mat[2]);
  eng_sb_put(&b, "predicted step %.4f s (%.1f tokens/s): compute %.4f s of which recompute %.4f s, exposed %.4f s; "
                 "window model %.4f s\n",
             p->step_time, p->tokens_per_s, p->t_compute, p->t_recompute, p->t_exposed, p->model_step_time);
  if (p->ranks > 1)
    eng_sb_put(&b, "one rank of %d (its share of the batch): of the exposed time, %.4f s summing over the ranks and "
                   "gathering the updated parts\n",
               p->ranks, p->t_comm);
  eng_sb_put(&b, "peak activation bytes: device %.3f GiB (+ %.3f GiB fixed), host %.3f GiB (+ %.3f GiB training state), "
                 "NVMe %.3f GiB\n",
             gib((double)p->peak_dev), gib((double)p->dev_fixed), gib((double)p->peak_host), gib((double)p->host_state),
             gib((double)p->peak_nvme));
  if (p->params)
    eng_sb_put(&b, "training state in host memory: %.2f bytes per parameter (%.3f B parameters)\n",
               (double)p->host_state / (double)p->params, (double)p->params * 1e-9);
  if (isfinite(p->gap))
    eng_sb_put(&b, "solver: %s, %s, gap %.2f%%, %.3f s\n", p->method, p->optimal ? "optimal" : "not proven optimal",
               100.0 * p->gap, p->solve_time);
  else
    eng_sb_put(&b, "solver: %s, no bound, %.3f s\n", p->method, p->solve_time);
  if (b.oom) {
    free(b.s);
    return eng_err_set(e, ENG_ENOMEM, "plan table: out of memory");
  }
  *out = b.s;
  return 0;
}
