// Streaming invariance: with a device cap smaller than the model (layers
// really stream: the bytes copied in are asserted), losses and gradients are
// bit-identical across caps, checkpoint intervals and checkpoint placement;
// more micro-batches leave the logits bit-identical and move each gradient by
// at most 1e-6 in ‖Δ‖/‖ref‖; a cap too small is refused before allocation.
// A plan's transfers are performed as it lists them: boundaries in host
// memory and in the spill store (a real RocksDB store), moved in ranges cut
// differently on every lane and spread over the windows each lane may use,
// give the same bits, at the arena the plan needs and not one byte less.
#define _XOPEN_SOURCE 700
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "route.h"
#include "model/layout.h"
#include "plan_ranges.h"
#include "tiny.h"
#include "unit/grads.h"
#include "unit/tmpdir.h"
#include "unit/spill.h"

// Wide MLPs and short sequences make layers heavy next to activations, so
// the smallest cap holds much less than the model (~0.9M parameters).
enum { LAYERS = 8 };

static double rel_norm(const float *a, const float *b, size_t n) {
  double d = 0, r = 0;
  for (size_t i = 0; i < n; i++) {
    d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    r += (double)b[i] * b[i];
  }
  return r > 0 ? sqrt(d / r) : sqrt(d);
}

int main(void) {
  test_route_announce();
  eng_spec base;
  tiny_spec(&base, LAYERS);
  base.config.d_ff = 512;
  base.batch = 4;
  base.seq_len = 16;
  size_t n = (size_t)base.batch * base.seq_len;
  int32_t *ids = malloc(n * sizeof *ids), *labels = malloc(n * sizeof *labels);
  for (size_t i = 0; i < n; i++) {
    ids[i] = (int32_t)((i * 7919 + 13) % 256);
    labels[i] = i % 11 == 3 ? -100 : ids[i];
  }
  eng_err e = {0};

  // The smallest cap this policy accepts must be below the model's size.
  eng_layout lo;
  eng_layout_init(&lo, &base.config);
  size_t need;
  CHECK_OK(eng_spec_device_bytes(&base, &need, &e), &e);
  size_t model_bytes = lo.total_numel * sizeof(float);
  printf("model %zu bytes, minimal cap %zu bytes\n", model_bytes, need);
  CHECK(need < model_bytes, "the test model (%zu B) must not fit in the minimal cap (%zu B)", model_bytes, need);

  result ref;
  base.device_cap = need;
  grads_run(&base, &ref, ids, labels);

  struct { int cap_mul, ckpt_every; eng_place place; } cases[] = {
      {4, 1, ENG_PLACE_DEVICE}, {1, 2, ENG_PLACE_DEVICE}, {1, 0, ENG_PLACE_DEVICE},
      {1, 1, ENG_PLACE_HOST},   {1, 2, ENG_PLACE_HOST},   {2, 0, ENG_PLACE_HOST},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    eng_spec s = base;
    s.ckpt_every = cases[c].ckpt_every;
    s.ckpt_place = cases[c].place;
    size_t need_c;
    CHECK_OK(eng_spec_device_bytes(&s, &need_c, &e), &e);
    s.device_cap = need_c * cases[c].cap_mul;
    result got;
    grads_run(&s, &got, ids, labels);
    CHECK(got.n_grads == ref.n_grads, "gradient count differs");
    CHECK(!memcmp(got.grads, ref.grads, ref.n_grads * sizeof(float)),
          "case %zu (ckpt every %d, %s, cap %zu): gradients are not bit-identical", c,
          s.ckpt_every, s.ckpt_place == ENG_PLACE_HOST ? "host" : "device", s.device_cap);
    CHECK(!memcmp(got.loss, ref.loss, sizeof ref.loss), "case %zu: losses are not bit-identical", c);
    printf("ckpt every %d on %s, cap %zu: bit-identical\n", s.ckpt_every,
           s.ckpt_place == ENG_PLACE_HOST ? "host" : "device", s.device_cap);
    grads_free(&got);
  }

  // A plan's mixed policy: boundaries on the device, in host memory or
  // recomputed (blocks of 1 to 3 layers), some layers keeping their inner
  // activations, at the smallest cap it accepts.
  {
    static const eng_place place[LAYERS] = {ENG_PLACE_DEVICE, ENG_PLACE_NONE, ENG_PLACE_HOST, ENG_PLACE_NONE,
                                            ENG_PLACE_NONE,   ENG_PLACE_DEVICE, ENG_PLACE_HOST, ENG_PLACE_NONE};
    static const uint8_t keep[LAYERS] = {1, 0, 0, 1, 0, 1, 0, 1};
    eng_spec s = base;
    eng_plan pl;
    ranged_plan(&pl, &s, place, keep, sizeof(float));
    s.plan = &pl;
    CHECK_OK(eng_spec_device_bytes(&s, &s.device_cap, &e), &e);
    result got;
    grads_run(&s, &got, ids, labels);
    CHECK(!memcmp(got.grads, ref.grads, ref.n_grads * sizeof(float)), "mixed plan: gradients are not bit-identical");
    CHECK(!memcmp(got.loss, ref.loss, sizeof ref.loss), "mixed plan: losses are not bit-identical");
    printf("mixed plan (device/host/recomputed, 4 layers keep activations), cap %zu: bit-identical\n", s.device_cap);
    grads_free(&got);
    eng_plan_free(&pl);
  }

  // A plan with every tier, its transfers in ranges (ranged_plan), through
  // a real spill store; at the arena it needs, and refused one byte below.
  {
    static const eng_place place[LAYERS] = {ENG_PLACE_DEVICE, ENG_PLACE_NONE,  ENG_PLACE_STORE, ENG_PLACE_NONE,
                                            ENG_PLACE_HOST,   ENG_PLACE_STORE, ENG_PLACE_NONE,  ENG_PLACE_HOST};
    static const uint8_t keep[LAYERS] = {1, 0, 0, 1, 0, 1, 0, 1};
    tmp_make();
    spill sp;
    spill_open(&sp, "spill", "plan");
    eng_plan pl;
    eng_spec s = base;
    ranged_plan(&pl, &s, place, keep, sizeof(float));
    s.plan = &pl;
    s.spill = &sp.es;
    CHECK_OK(eng_spec_device_bytes(&s, &s.device_cap, &e), &e);
    result got;
    grads_run(&s, &got, ids, labels);
    CHECK(!memcmp(got.grads, ref.grads, ref.n_grads * sizeof(float)), "ranged plan: gradients are not bit-identical");
    CHECK(!memcmp(got.loss, ref.loss, sizeof ref.loss), "ranged plan: losses are not bit-identical");
    printf("plan with device, host, store and recomputed boundaries, %d transfers in ranges, cap %zu: bit-identical\n",
           pl.n_xfer, s.device_cap);
    grads_free(&got);
    // The step's timeline: each layer's forward and backward, the head, the
    // recompute of the blocks' interiors, every piece on each of its lanes.
    eng_run *r = NULL;
    CHECK_OK(eng_open(&s, &r, &e), &e);
    eng_metrics m;
    CHECK_OK(eng_step_batch(r, ids, labels, NULL, &m, &e), &e);
    const eng_plan_span *tl;
    int n_sp = eng_timeline(r, &tl), count[128] = {0};
    for (int i = 0; i < n_sp; i++) {
      CHECK(tl[i].t0 >= 0 && tl[i].t0 <= tl[i].t1 && tl[i].t1 <= m.t_total, "span %s at %g..%g s of a %g s step",
            tl[i].what, tl[i].t0, tl[i].t1, m.t_total);
      count[(unsigned char)tl[i].what[0] & 127]++;
    }
    int rec = 0;
    for (int l = 0; l < LAYERS; l++) rec += place[l] == ENG_PLACE_NONE;
    CHECK(count['F'] == LAYERS && count['B'] == LAYERS && count['H'] == 1 && count['R'] == rec && count['b'] >= pl.n_xfer &&
          count['w'] >= 2 * LAYERS && count['g'] == LAYERS + 1,
          "timeline: %d F, %d B, %d H, %d R, %d b, %d w, %d g spans", count['F'], count['B'], count['H'], count['R'],
          count['b'], count['w'], count['g']);
    printf("timeline of a step: %d spans (%d transfers of boundaries)\n", n_sp, count['b']);
    eng_close(r);
    s.device_cap--;
    r = NULL;
    CHECK(eng_open(&s, &r, &e) == ENG_ECAP && !r, "the plan's arena less one byte was not refused");
    printf("one byte less: %s\n", e.msg);
    eng_plan_free(&pl);
    spill_close(&sp);
    tmp_cleanup();
  }

  // Micro-batches: same batch split in 2 and 4. The bound is on what the
  // device accumulates (fp32), so the store keeps fp32 for this comparison.
  base.grad_dtype = ENG_GRAD_F32;
  base.device_cap = (size_t)64 << 20;
  grads_free(&ref);
  grads_run(&base, &ref, ids, labels);
  for (int mbs = 2; mbs <= 4; mbs *= 2) {
    eng_spec s = base;
    s.micro_batches = mbs;
    s.device_cap = (size_t)64 << 20;
    result got;
    grads_run(&s, &got, ids, labels);
    size_t nl = n * base.config.vocab;
    CHECK(!memcmp(got.logits, ref.logits, nl * sizeof(float)), "%d micro-batches: logits differ", mbs);
    double worst = 0;
    size_t off = 0;
    for (int sh = 0; sh < lo.n_shards; sh++) {
      size_t k = eng_layout_shard_numel(&lo, sh);
      double rel = rel_norm(got.grads + off, ref.grads + off, k);
      CHECK(rel <= 1e-6, "%d micro-batches: shard %d gradient moved by %.3e", mbs, sh, rel);
      if (rel > worst) worst = rel;
      off += k;
    }
    printf("%d micro-batches: logits bit-identical, worst gradient ‖Δ‖/‖ref‖ %.2e\n", mbs, worst);
    grads_free(&got);
  }

  // A cap one byte too small is refused with the bytes needed.
  eng_spec s = base;
  s.device_cap = need - 1;
  eng_run *r = NULL;
  int rc = eng_open(&s, &r, &e);
  CHECK(rc == ENG_ECAP && r == NULL, "a too-small cap returned %d", rc);
  char want[64];
  snprintf(want, sizeof want, "%zu bytes", need);
  CHECK(strstr(e.msg, want), "refusal does not name the bytes needed: %s", e.msg);
  printf("refused: %s\n", e.msg);

  grads_free(&ref);
  free(ids);
  free(labels);
  return 0;
}
