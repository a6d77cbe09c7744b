#include "plan/plan.h"

#include <stdlib.h>
#include <string.h>

int eng_plan_init(eng_plan *p, int L, eng_err *e) {
  memset(p, 0, sizeof *p);
  if (L < 1) return eng_err_set(e, ENG_EINVAL, "plan: %d layers", L);
  p->n_layers = L;
  p->ranks = 1;
  p->bnd = calloc((size_t)L + 1, sizeof *p->bnd);
  p->keep_inner = calloc((size_t)L, sizeof *p->keep_inner);
  p->win = calloc(2 * (size_t)L + 1, sizeof *p->win);
  if (!p->bnd || !p->keep_inner || !p->win) {
    eng_plan_free(p);
    return eng_err_set(e, ENG_ENOMEM, "plan: cannot allocate a plan of %d layers", L);
  }
  p->bnd[0].materialised = 1;
  return 0;
}

void eng_plan_free(eng_plan *p) {
  free(p->bnd);
  free(p->keep_inner);
  free(p->win);
  free(p->xfer);
  memset(p, 0, sizeof *p);
}

int eng_plan_copy(eng_plan *dst, const eng_plan *src, eng_err *e) {
  int rc = eng_plan_init(dst, src->n_layers, e);
  if (rc) return rc;
  eng_plan_bnd *b = dst->bnd;
  uint8_t *k = dst->keep_inner;
  eng_plan_win *w = dst->win;
  *dst = *src;
  dst->bnd = b;
  dst->keep_inner = k;
  dst->win = w;
  dst->xfer = NULL;
  const size_t L = (size_t)src->n_layers;
  memcpy(b, src->bnd, (L + 1) * sizeof *b);
  memcpy(k, src->keep_inner, L * sizeof *k);
  memcpy(w, src->win, (2 * L + 1) * sizeof *w);
  if (src->n_xfer) {
    dst->xfer = malloc((size_t)src->n_xfer * sizeof *dst->xfer);
    if (!dst->xfer) {
      eng_plan_free(dst);
      return eng_err_set(e, ENG_ENOMEM, "plan: cannot copy %d transfers", src->n_xfer);
    }
    memcpy(dst->xfer, src->xfer, (size_t)src->n_xfer * sizeof *dst->xfer);
  }
  return 0;
}

int eng_plan_xfer_add(eng_plan *p, int boundary, eng_lane lane, int window, uint64_t offset,
                      uint64_t bytes, eng_err *e) {
  // Grows by doubling: the count is a power of two exactly when the array is full.
  int n = p->n_xfer;
  if ((n & (n - 1)) == 0) {
    eng_plan_xfer *x = realloc(p->xfer, (size_t)(n ? 2 * n : 16) * sizeof *x);
    if (!x) return eng_err_set(e, ENG_ENOMEM, "plan: cannot grow the transfer list past %d", n);
    p->xfer = x;
  }
  p->xfer[p->n_xfer++] = (eng_plan_xfer){boundary, lane, window, offset, bytes};
  return 0;
}

int eng_plan_structure(eng_plan *p, eng_err *e) {
  const int L = p->n_layers;
  if (!p->bnd[0].materialised) return eng_err_set(e, ENG_EINVAL, "plan: boundary 0 is not materialised");
  p->bnd[L].materialised = 0;
  // Blocks from each materialised boundary to the next (L ends the last).
  int s = 0;
  for (int i = 1; i <= L; i++) {
    if (i < L && !p->bnd[i].materialised) continue;
    if (p->max_block > 0 && i - s > p->max_block)
      return eng_err_set(e, ENG_EINVAL, "plan: block (%d, %d) is longer than the maximum %d", s, i,
                         p->max_block);
    p->bnd[s].block_end = i;
    s = i;
  }
  for (int i = 0; i < L; i++)
    if (!p->bnd[i].materialised) p->bnd[i].block_end = 0;
  for (int l = 0; l < L; l++) p->win[l] = (eng_plan_win){ENG_WIN_FWD, l, l, p->win[l].t_compute, p->win[l].t_exposed};
  p->win[L].kind = ENG_WIN_HEAD;
  p->win[L].layer = -1;
  p->win[L].recompute_from = -1;
  for (int j = L - 1; j >= 0; j--) {
    eng_plan_win *w = &p->win[2 * L - j];
    w->kind = ENG_WIN_BWD;
    w->layer = w->recompute_from = j;
  }
  for (int i = 0; i < L; i++)
    if (p->bnd[i].materialised) p->win[2 * L - (p->bnd[i].block_end - 1)].recompute_from = i;
  return 0;
}

const char *eng_tier_name(eng_tier t) {
  switch (t) {
  case ENG_TIER_DEVICE: return "device";
  case ENG_TIER_HOST: return "host";
  case ENG_TIER_NVME: return "nvme";
  }
  return "?";
}

const char *eng_lane_name(eng_lane l) {
  switch (l) {
  case ENG_LANE_H2D: return "h2d";
  case ENG_LANE_D2H: return "d2h";
  case ENG_LANE_NVME_W: return "nvme_w";
  case ENG_LANE_NVME_R: return "nvme_r";
  case ENG_LANE_COUNT: break;
  }
  return "?";
}
