#define _GNU_SOURCE // qsort_r
#include "exec/exec_sched.h"

#include <stdlib.h>
#include <string.h>

void exec_sched_free(exec_sched *s) {
  free(s->place);
  free(s->keep);
  free(s->block_end);
  free(s->piece);
  free(s->xfer);
  free(s->win_at);
  free(s->own);
  free(s->back);
  free(s->rc);
  free(s->out_last);
  free(s->in_first);
  memset(s, 0, sizeof *s);
}

static int is_off(eng_place p) { return p == ENG_PLACE_HOST || p == ENG_PLACE_STORE; }

// The lanes a boundary of this place moves on.
static int lane_used(eng_place p, int lane) {
  if (p == ENG_PLACE_HOST) return lane == ENG_LANE_D2H || lane == ENG_LANE_H2D;
  return p == ENG_PLACE_STORE;
}

static int add_piece(exec_sched *s, int *cap, int bnd, size_t off, size_t n, eng_err *e) {
  if (s->n_piece == *cap) {
    int nc = *cap ? 2 * *cap : 16;
    exec_piece *np = realloc(s->piece, (size_t)nc * sizeof *np);
    if (!np) return eng_err_set(e, ENG_ENOMEM, "cannot allocate the step's transfer schedule");
    s->piece = np;
    *cap = nc;
  }
  exec_piece *p = &s->piece[s->n_piece++];
  *p = (exec_piece){bnd, off, n, {-1, -1, -1, -1}};
  return 0;
}

static int by_size(const void *a, const void *b) {
  size_t x = *(const size_t *)a, y = *(const size_t *)b;
  return x < y ? -1 : x > y;
}

// Boundary i's pieces from the plan's ranges: each lane's ranges must tile
// [0, A); the pieces are cut at every lane's range edges.
static int plan_pieces(exec_sched *s, int *cap, const eng_plan *p, int i, eng_err *e) {
  const size_t A = s->bnd_bytes;
  size_t *cuts = malloc(((size_t)p->n_xfer + 2) * sizeof *cuts);
  if (!cuts) return eng_err_set(e, ENG_ENOMEM, "cannot allocate the step's transfer schedule");
  int nc = 0;
  size_t moved[ENG_LANE_COUNT] = {0};
  cuts[nc++] = 0;
  for (int t = 0; t < p->n_xfer; t++) {
    const eng_plan_xfer *x = &p->xfer[t];
    if (x->boundary != i) continue;
    if ((unsigned)x->lane >= ENG_LANE_COUNT || !lane_used(s->place[i], x->lane) || x->bytes == 0 ||
        x->offset + x->bytes > A) {
      free(cuts);
      return eng_err_set(e, ENG_EINVAL, "plan: transfer %d of boundary %d (%s, bytes %llu..%llu of %zu) does not fit "
                         "a boundary that lives in %s", t, i, (unsigned)x->lane < ENG_LANE_COUNT ? eng_lane_name(x->lane) : "?",
                         (unsigned long long)x->offset, (unsigned long long)(x->offset + x->bytes), A,
                         s->place[i] == ENG_PLACE_HOST ? "host memory" : "the store");
    }
    moved[x->lane] += x->bytes;
    cuts[nc++] = x->offset;
  }
  cuts[nc++] = A;
  qsort(cuts, (size_t)nc, sizeof *cuts, by_size);
  int first = s->n_piece, rc = 0;
  for (int k = 0; k + 1 < nc && !rc; k++)
    if (cuts[k + 1] > cuts[k]) rc = add_piece(s, cap, i, cuts[k], cuts[k + 1] - cuts[k], e);
  free(cuts);
  if (rc) return rc;
  // Each piece lies inside exactly one range per used lane (the lane's
  // ranges move A bytes in all and every range edge is a cut).
  for (int lane = 0; lane < ENG_LANE_COUNT; lane++) {
    if (!lane_used(s->place[i], lane)) continue;
    if (moved[lane] != A)
      return eng_err_set(e, ENG_EINVAL, "plan: boundary %d moves %zu bytes on %s, its size is %zu", i, moved[lane],
                         eng_lane_name((eng_lane)lane), A);
    for (int t = 0; t < p->n_xfer; t++) {
      const eng_plan_xfer *x = &p->xfer[t];
      if (x->boundary != i || x->lane != (eng_lane)lane) continue;
      for (int q = first; q < s->n_piece; q++) {
        exec_piece *pc = &s->piece[q];
        if (pc->off < x->offset || pc->off + pc->n > x->offset + x->bytes) continue;
        if (pc->win[lane] >= 0)
          return eng_err_set(e, ENG_EINVAL, "plan: boundary %d bytes %zu.. move twice on %s", i, pc->off,
                             eng_lane_name((eng_lane)lane));
        pc->win[lane] = x->window;
      }
    }
  }
  return 0;
}

// The uniform policy's transfers: the whole boundary, out as its forward
// window runs (written to the store in the same window), back in the
// window before its block's backward (read from the store there first).
static int uniform_pieces(exec_sched *s, int *cap, int i, eng_err *e) {
  int rc = add_piece(s, cap, i, 0, s->bnd_bytes, e);
  if (rc) return rc;
  exec_piece *pc = &s->piece[s->n_piece - 1];
  int in = 2 * s->L - s->block_end[i];
  pc->win[ENG_LANE_D2H] = i;
  pc->win[ENG_LANE_H2D] = in;
  if (s->place[i] == ENG_PLACE_STORE) {
    pc->win[ENG_LANE_NVME_W] = i;
    pc->win[ENG_LANE_NVME_R] = in;
  }
  return 0;
}

// Windows a piece may move in: out from its boundary's forward window to
// the last forward one, in from the head to the window before its block's
// backward, and along the chain copy-out, write, read, copy-in (a write and
// a read not in one window, since a read needs the write landed before).
static int piece_check(const exec_sched *s, const exec_piece *pc, eng_err *e) {
  const int L = s->L, i = pc->bnd, need = 2 * L - (s->block_end[i] - 1);
  const int *w = pc->win;
  const char *bad = NULL;
  if (w[ENG_LANE_D2H] < i || w[ENG_LANE_D2H] > L - 1) bad = "its copy-out is outside the forward windows from its own";
  else if (w[ENG_LANE_H2D] < L || w[ENG_LANE_H2D] > need - 1)
    bad = "its copy-in is outside the windows from the head to the one before its block's backward";
  else if (s->place[i] == ENG_PLACE_STORE &&
           (w[ENG_LANE_NVME_W] < w[ENG_LANE_D2H] || w[ENG_LANE_NVME_R] <= w[ENG_LANE_NVME_W] ||
            w[ENG_LANE_H2D] < w[ENG_LANE_NVME_R]))
    bad = "its lanes are out of order (copy-out, write, read, copy-in)";
  if (!bad) return 0;
  return eng_err_set(e, ENG_EINVAL, "plan: boundary %d bytes %zu..%zu: %s (windows D2H %d, write %d, read %d, H2D %d)", i,
                     pc->off, pc->off + pc->n, bad, w[ENG_LANE_D2H], w[ENG_LANE_NVME_W], w[ENG_LANE_NVME_R],
                     w[ENG_LANE_H2D]);
}

// Transfers in issue order: by window, then copy-out, write, read, copy-in
// (a lane waits only on the lane before it in that chain), then boundary
// and offset.
static int by_issue(const void *a, const void *b, void *ctx) {
  const exec_sched *s = ctx;
  const exec_xfer *x = a, *y = b;
  const exec_piece *p = &s->piece[x->piece], *q = &s->piece[y->piece];
  static const int rank[ENG_LANE_COUNT] = {[ENG_LANE_D2H] = 0, [ENG_LANE_NVME_W] = 1, [ENG_LANE_NVME_R] = 2,
                                           [ENG_LANE_H2D] = 3};
  int wx = p->win[x->lane], wy = q->win[y->lane];
  if (wx != wy) return wx < wy ? -1 : 1;
  if (x->lane != y->lane) return rank[x->lane] < rank[y->lane] ? -1 : 1;
  if (p->bnd != q->bnd) return p->bnd < q->bnd ? -1 : 1;
  return p->off < q->off ? -1 : p->off > q->off;
}

typedef struct span {
  int w0, w1;
  int *slot;
} span;

static int by_start(const void *a, const void *b) {
  const span *x = a, *y = b;
  if (x->w0 != y->w0) return x->w0 < y->w0 ? -1 : 1;
  return x->w1 < y->w1 ? -1 : x->w1 > y->w1;
}

// Interval colouring in order of start: a buffer is reused once its last
// span has ended, so the pool is as large as the most spans alive at once.
static int pool_assign(exec_sched *s, eng_err *e) {
  const int L = s->L;
  span *sp = malloc(3 * (size_t)L * sizeof *sp);
  int *free_after = malloc(3 * (size_t)L * sizeof *free_after);
  if (!sp || !free_after) {
    free(sp);
    free(free_after);
    return eng_err_set(e, ENG_ENOMEM, "cannot allocate the step's buffer pool");
  }
  int n = 0;
  for (int i = 0; i < L; i++) {
    s->own[i] = s->back[i] = s->rc[i] = -1;
    if (s->place[i] == ENG_PLACE_DEVICE) sp[n++] = (span){i, 2 * L - i, &s->own[i]};
    if (is_off(s->place[i])) {
      if (s->out_last[i] > i) sp[n++] = (span){i + 1, s->out_last[i], &s->own[i]};
      sp[n++] = (span){s->in_first[i], 2 * L - i, &s->back[i]};
    }
    if (s->place[i] != ENG_PLACE_NONE)
      for (int m = i + 1; m < s->block_end[i]; m++) sp[n++] = (span){2 * L - (s->block_end[i] - 1), 2 * L - m, &s->rc[m]};
  }
  qsort(sp, (size_t)n, sizeof *sp, by_start);
  s->n_pool = 0;
  for (int k = 0; k < n; k++) {
    int b = 0;
    while (b < s->n_pool && free_after[b] >= sp[k].w0) b++;
    if (b == s->n_pool) s->n_pool++;
    free_after[b] = sp[k].w1;
    *sp[k].slot = b;
  }
  free(sp);
  free(free_after);
  return 0;
}

int exec_sched_build(exec_sched *s, int L, size_t bnd_bytes, const eng_place *place, const uint8_t *keep,
                     const eng_plan *p, eng_err *e) {
  memset(s, 0, sizeof *s);
  s->L = L;
  s->W = 2 * L + 1;
  s->bnd_bytes = bnd_bytes;
  if (p && (p->n_layers != L || p->bnd_bytes != bnd_bytes))
    return eng_err_set(e, ENG_EINVAL, "plan: made for %d layers and boundaries of %llu bytes; the run has %d and %zu",
                       p->n_layers, (unsigned long long)p->bnd_bytes, L, bnd_bytes);
  s->place = calloc((size_t)L, sizeof *s->place);
  s->keep = calloc((size_t)L, sizeof *s->keep);
  s->block_end = calloc((size_t)L, sizeof *s->block_end);
  s->own = calloc((size_t)L, sizeof *s->own);
  s->back = calloc((size_t)L, sizeof *s->back);
  s->rc = calloc((size_t)L, sizeof *s->rc);
  s->out_last = calloc((size_t)L, sizeof *s->out_last);
  s->in_first = calloc((size_t)L, sizeof *s->in_first);
  s->win_at = calloc((size_t)s->W + 1, sizeof *s->win_at);
  int rc = 0;
  if (!s->place || !s->keep || !s->block_end || !s->own || !s->back || !s->rc || !s->out_last || !s->in_first ||
      !s->win_at) {
    rc = eng_err_set(e, ENG_ENOMEM, "cannot allocate the step's schedule");
    goto fail;
  }
  for (int i = 0; i < L; i++) {
    if (p) {
      const eng_plan_bnd *b = &p->bnd[i];
      s->place[i] = !b->materialised ? ENG_PLACE_NONE
                    : b->tier == ENG_TIER_DEVICE ? ENG_PLACE_DEVICE
                    : b->tier == ENG_TIER_HOST   ? ENG_PLACE_HOST
                                                 : ENG_PLACE_STORE;
      s->keep[i] = p->keep_inner[i] != 0;
    } else {
      s->place[i] = place[i];
      s->keep[i] = keep[i];
    }
  }
  if (s->place[0] == ENG_PLACE_NONE) {
    rc = eng_err_set(e, ENG_EINVAL, "policy: boundary 0 must be kept (the backward recomputes from it)");
    goto fail;
  }
  for (int i = L - 1, next = L; i >= 0; i--) {
    s->block_end[i] = next;
    if (s->place[i] != ENG_PLACE_NONE) next = i;
  }
  int cap = 0;
  for (int i = 0; i < L && !rc; i++) {
    if (!is_off(s->place[i])) continue;
    int first = s->n_piece;
    rc = p ? plan_pieces(s, &cap, p, i, e) : uniform_pieces(s, &cap, i, e);
    s->out_last[i] = -1;
    s->in_first[i] = s->W;
    for (int q = first; q < s->n_piece && !rc; q++) {
      rc = piece_check(s, &s->piece[q], e);
      if (s->piece[q].win[ENG_LANE_D2H] > s->out_last[i]) s->out_last[i] = s->piece[q].win[ENG_LANE_D2H];
      if (s->piece[q].win[ENG_LANE_H2D] < s->in_first[i]) s->in_first[i] = s->piece[q].win[ENG_LANE_H2D];
    }
  }
  if (!rc && p)
    for (int t = 0; t < p->n_xfer && !rc; t++)
      if (p->xfer[t].boundary < 0 || p->xfer[t].boundary >= L || !is_off(s->place[p->xfer[t].boundary]))
        rc = eng_err_set(e, ENG_EINVAL, "plan: transfer %d moves boundary %d, which stays on the device or is recomputed",
                         t, p->xfer[t].boundary);
  if (rc) goto fail;

  s->xfer = malloc(((size_t)s->n_piece * ENG_LANE_COUNT + 1) * sizeof *s->xfer);
  if (!s->xfer) {
    rc = eng_err_set(e, ENG_ENOMEM, "cannot allocate the step's transfers");
    goto fail;
  }
  for (int q = 0; q < s->n_piece; q++)
    for (int lane = 0; lane < ENG_LANE_COUNT; lane++)
      if (s->piece[q].win[lane] >= 0) s->xfer[s->n_xfer++] = (exec_xfer){q, (eng_lane)lane};
  qsort_r(s->xfer, (size_t)s->n_xfer, sizeof *s->xfer, by_issue, s);
  for (int t = 0, w = 0; w <= s->W; w++) {
    while (t < s->n_xfer && s->piece[s->xfer[t].piece].win[s->xfer[t].lane] < w) t++;
    s->win_at[w] = t;
  }
  if ((rc = pool_assign(s, e))) goto fail;
  return 0;
fail:
  exec_sched_free(s);
  return rc;
}
