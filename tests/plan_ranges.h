// Plans written by hand for the executor's tests: a placement and kept
// layers of the test's choosing, with every off-device boundary's transfers
// cut into ranges, each lane differently, spread over the windows each lane
// may use (plan/plan.h): out in three over the forward windows from the
// boundary's own, to the store in two and back from it in three (at the
// head and just after, or where the boundary's block ends sooner, in the
// last forward window and at the head), in again in two up to the window
// before its block's backward.
#ifndef TESTS_PLAN_RANGES_H
#define TESTS_PLAN_RANGES_H

#include "check.h"
#include "engine.h"

// Rows [k*rows/parts, (k+1)*rows/parts) of boundary i on `lane`, in window
// w0 + k, clamped to w1.
static inline void plan_add_ranges(eng_plan *p, int i, eng_lane lane, int parts, int w0, int w1) {
  eng_err e = {0};
  uint64_t rows = p->bnd_bytes / p->row_bytes;
  for (int k = 0; k < parts; k++) {
    uint64_t r0 = rows * k / parts, r1 = rows * (k + 1) / parts;
    int w = w0 + k < w1 ? w0 + k : w1;
    CHECK_OK(eng_plan_xfer_add(p, i, lane, w, r0 * p->row_bytes, (r1 - r0) * p->row_bytes, &e), &e);
  }
}

// The plan of place / keep for spec s (its batch, sequence and split) with
// activations of act_bytes per value on the device.
static inline void ranged_plan(eng_plan *p, const eng_spec *s, const eng_place *place, const uint8_t *keep,
                               int act_bytes) {
  const int L = s->config.n_layers;
  eng_err e = {0};
  CHECK_OK(eng_plan_init(p, L, &e), &e);
  p->batch = s->batch;
  p->seq_len = s->seq_len;
  p->n_micro = s->micro_batches;
  p->micro_batch = s->batch / s->micro_batches;
  p->act_bytes = act_bytes;
  p->row_bytes = (uint64_t)s->config.d_model * act_bytes;
  p->bnd_bytes = (uint64_t)s->batch * s->seq_len * p->row_bytes;
  for (int i = 0; i < L; i++) {
    p->bnd[i].materialised = place[i] != ENG_PLACE_NONE;
    p->bnd[i].tier = place[i] == ENG_PLACE_HOST ? ENG_TIER_HOST : place[i] == ENG_PLACE_STORE ? ENG_TIER_NVME
                                                                                           : ENG_TIER_DEVICE;
    p->keep_inner[i] = keep[i];
  }
  CHECK_OK(eng_plan_structure(p, &e), &e);
  for (int i = 0; i < L; i++) {
    if (place[i] != ENG_PLACE_HOST && place[i] != ENG_PLACE_STORE) continue;
    int need = 2 * L - (p->bnd[i].block_end - 1), store = place[i] == ENG_PLACE_STORE;
    int late = need - 1 >= L + 1, w_write = late ? L : L - 1, w_read = w_write + 1;
    plan_add_ranges(p, i, ENG_LANE_D2H, 3, i, L - 1);
    if (store) {
      plan_add_ranges(p, i, ENG_LANE_NVME_W, 2, w_write, w_write);
      plan_add_ranges(p, i, ENG_LANE_NVME_R, 3, w_read, w_read);
    }
    plan_add_ranges(p, i, ENG_LANE_H2D, 2, store ? w_read : L, need - 1);
  }
}

#endif
