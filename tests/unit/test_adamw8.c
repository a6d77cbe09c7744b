// The fused 8-bit AdamW pass against a straightforward scalar reference of
// the same math written here (dequantize m and sqrt(v), eng_adamw_update's
// arithmetic, new absmaxes, nearest code found by scanning the map), bit for
// bit: every SIMD path this CPU has, 1 and 2 threads, fp32 and bf16
// gradients, fp32/bf16/no working copy, block sizes 64/256/2048, tensors that
// are not a multiple of the block (nor of 16), blocks of zeros and of
// subnormal moments, several steps so the state goes round the codes, and
// more blocks than the pass splits its statistics into. Also: an fp32-state
// tensor equals eng_adamw_update bit for bit; non-finite gradients are
// counted and leave their elements alone; save/restore continues the same
// trajectory and refuses what it must; the state costs <= 2.05 bytes/param.
#include "optim/adamw8.h"

#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/bf16.h"
#include "optim/adamw.h"
#include "optim/q8map.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;

static double urand(void) { // uniform in [0, 1)
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0;
}

// Gradients with magnitudes over several decades, some exact zeros, one block
// of zeros and one of values so small that the moments become subnormal.
static void fill_grad(float *g, size_t n, int block) {
  for (size_t i = 0; i < n; i++) {
    double mag = pow(10.0, -6.0 * urand());
    g[i] = (float)((urand() < 0.5 ? -mag : mag) * (urand() < 0.03 ? 0.0 : 1.0));
  }
  for (size_t i = (size_t)block; i < 2 * (size_t)block && i < n; i++) g[i] = 0.0f;
  for (size_t i = 3 * (size_t)block; i < 4 * (size_t)block && i < n; i++) g[i] = (float)(urand() * 1e-38);
}

// ---- the reference -----------------------------------------------------------

// Nearest value of the map to a magnitude x >= 0 by scanning: the code c with
// value[c] <= x < value[c + 1], then whichever neighbour is closer; a tie
// takes the smaller magnitude. Both distances are exact in double.
static uint32_t ref_nearest_mag(const eng_q8map *q, float x) {
  uint32_t c = 0;
  while (c + 1 < (uint32_t)q->nmag && q->value[c + 1] <= x) c++;
  if (c + 1 == (uint32_t)q->nmag) return c;
  double d0 = (double)x - q->value[c], d1 = (double)q->value[c + 1] - x;
  return d1 < d0 ? c + 1 : c;
}

static uint8_t ref_encode(const eng_q8map *q, float x) {
  if (!q->is_signed) return (uint8_t)ref_nearest_mag(q, x);
  return (uint8_t)(ref_nearest_mag(q, fabsf(x)) | (signbit(x) ? 0x80u : 0u));
}

typedef struct {
  size_t numel;
  int block, quantized;
  float *w, *m, *v;      // fp32 moments (quantized: m and sqrt(v) before encoding)
  uint8_t *mq, *vq;
  float *ms, *vs;
  float *wf;
  uint16_t *wb;
  eng_adamw8_stats st;
} ref_t;

static void ref_step(ref_t *r, const float *g32, const uint16_t *gb, int work, const eng_adamw8_hparams *h) {
  const eng_q8map *qm = eng_q8_signed(), *qv = eng_q8_unsigned();
  const double bc1 = 1.0 - pow((double)h->beta1, (double)h->t);
  const double bc2 = 1.0 - pow((double)h->beta2, (double)h->t);
  const float step = (float)(h->lr / bc1), bc2s = (float)sqrt(bc2);
  const float decay = (float)(1.0 - (double)h->lr * h->wd), a1 = 1.0f - h->beta1, a2 = 1.0f - h->beta2;
  r->st = (eng_adamw8_stats){0};
  size_t nb = (r->numel + (size_t)r->block - 1) / (size_t)r->block;
  // Σ u² order: blocks in order within min(nb, 256) fixed chunks, chunks in order.
  size_t nc = nb < 256 ? nb : 256, chunk = 0;
  double chunk_sum = 0.0;
  for (size_t b = 0; b < nb; b++) {
    size_t i0 = b * (size_t)r->block, n = r->numel - i0 < (size_t)r->block ? r->numel - i0 : (size_t)r->block;
    float lanes[16] = {0}, am = 0.0f, av = 0.0f;
    for (size_t j = 0; j < n; j++) {
      size_t i = i0 + j;
      float m = r->quantized ? qm->value[r->mq[i]] * r->ms[b] : r->m[i];
      float root0 = r->quantized ? qv->value[r->vq[i]] * r->vs[b] : 0.0f;
      float v = r->quantized ? root0 * root0 : r->v[i];
      float g = g32 ? g32[i] : eng_bf16_to_f32(gb[i]);
      float gi = g * h->clip_scale;
      float p = r->w[i] * decay;
      float mi = m + (gi - m) * a1;
      float vi = v * h->beta2 + a2 * (gi * gi);
      float root = sqrtf(vi);
      float denom = root / bc2s + h->eps;
      float wn = p - step * (mi / denom);
      if (!isfinite(vi)) {
        r->st.nonfinite++;
        wn = r->w[i], mi = m, vi = v, root = root0;
      }
      if (r->quantized) vi = root; // the state keeps the root
      float u = wn - r->w[i];
      lanes[j % 16] += u * u;
      if (fabsf(u) > r->st.upd_absmax) r->st.upd_absmax = fabsf(u);
      r->w[i] = wn;
      if (work == 1) r->wf[i] = wn;
      if (work == 2) r->wb[i] = eng_bf16_from_f32(wn);
      r->m[i] = mi, r->v[i] = vi;
      if (fabsf(mi) > am) am = fabsf(mi);
      if (vi > av) av = vi;
    }
    double s = 0.0;
    for (int l = 0; l < 16; l++) s += lanes[l];
    chunk_sum += s;
    if (b + 1 == (chunk + 1) * nb / nc) {
      r->st.upd_sumsq += chunk_sum;
      chunk_sum = 0.0, chunk++;
    }
    if (!r->quantized) continue;
    am = am < FLT_MIN ? 0.0f : am, av = av < FLT_MIN ? 0.0f : av;
    float im = am > 0 ? 1.0f / am : 0.0f, iv = av > 0 ? 1.0f / av : 0.0f;
    for (size_t j = 0; j < n; j++) {
      r->mq[i0 + j] = ref_encode(qm, r->m[i0 + j] * im);
      r->vq[i0 + j] = ref_encode(qv, r->v[i0 + j] * iv);
    }
    r->ms[b] = am, r->vs[b] = av;
  }
}

// ---- helpers -------------------------------------------------------------------

static void *xalloc(size_t bytes) {
  void *p = calloc(1, bytes ? bytes : 1);
  CHECK(p, "out of memory (%zu bytes)", bytes);
  return p;
}

static void same_bits(const void *a, const void *b, size_t bytes, const char *what, const char *cfg) {
  if (memcmp(a, b, bytes) == 0) return;
  const unsigned char *x = a, *y = b;
  size_t k = 0;
  while (x[k] == y[k]) k++;
  CHECK(0, "%s: %s differs from the reference at byte %zu of %zu", cfg, what, k, bytes);
}

static void same_state(const eng_adamw8_state *s, const ref_t *r, const char *cfg) {
  if (s->quantized) {
    same_bits(s->mq, r->mq, s->numel, "m codes", cfg);
    same_bits(s->vq, r->vq, s->numel, "v codes", cfg);
    same_bits(s->ms, r->ms, s->nblocks * sizeof(float), "m absmax", cfg);
    same_bits(s->vs, r->vs, s->nblocks * sizeof(float), "v absmax", cfg);
  } else {
    same_bits(s->m, r->m, s->numel * sizeof(float), "m", cfg);
    same_bits(s->v, r->v, s->numel * sizeof(float), "v", cfg);
  }
}

static void same_stats(const eng_adamw8_stats *a, const eng_adamw8_stats *b, const char *cfg) {
  CHECK(memcmp(&a->upd_sumsq, &b->upd_sumsq, sizeof(double)) == 0 && a->upd_absmax == b->upd_absmax &&
            a->nonfinite == b->nonfinite,
        "%s: stats (%.17g, %.9g, %zu) differ from the reference (%.17g, %.9g, %zu)", cfg, a->upd_sumsq,
        (double)a->upd_absmax, a->nonfinite, b->upd_sumsq, (double)b->upd_absmax, b->nonfinite);
}

static const eng_adamw8_hparams hp0 = {.lr = 1e-3f, .wd = 0.1f, .beta1 = 0.9f, .beta2 = 0.999f,
                                       .eps = 1e-8f, .clip_scale = 0.75f, .t = 1};

// ---- the cases -------------------------------------------------------------------

enum { STEPS = 4 };

// One configuration: the reference trajectory once, then every path and
// thread count from the same start, compared after every step.
static void run_config(size_t numel, int block, size_t min_quant, int gbf16, int work) {
  char cfg[160];
  eng_err e = {0};
  eng_adamw8_opts o = {.min_quant_numel = min_quant, .block = block};
  float *w0 = xalloc(numel * sizeof(float));
  float *g32[STEPS];
  uint16_t *gb[STEPS];
  for (size_t i = 0; i < numel; i++) w0[i] = (float)(urand() * 2 - 1) * 0.05f;
  for (int k = 0; k < STEPS; k++) {
    g32[k] = xalloc(numel * sizeof(float));
    gb[k] = xalloc(numel * sizeof(uint16_t));
    fill_grad(g32[k], numel, block);
    for (size_t i = 0; i < numel; i++) gb[k][i] = eng_bf16_from_f32(g32[k][i]);
  }
  // Reference trajectory, kept per step.
  eng_adamw8_state probe;
  CHECK_OK(eng_adamw8_state_init(&probe, numel, &o, NULL, &e), &e);
  const int quantized = probe.quantized;
  const size_t nb = probe.nblocks;
  eng_adamw8_state_free(&probe);
  ref_t r = {.numel = numel, .block = block, .quantized = quantized};
  r.w = xalloc(numel * 4), r.m = xalloc(numel * 4), r.v = xalloc(numel * 4);
  r.mq = xalloc(numel), r.vq = xalloc(numel), r.ms = xalloc(nb * 4), r.vs = xalloc(nb * 4);
  r.wf = xalloc(numel * 4), r.wb = xalloc(numel * 2);
  memcpy(r.w, w0, numel * 4);
  ref_t snap[STEPS];
  for (int k = 0; k < STEPS; k++) {
    eng_adamw8_hparams h = hp0;
    h.t = k + 1;
    ref_step(&r, gbf16 ? NULL : g32[k], gbf16 ? gb[k] : NULL, work, &h);
    snap[k] = r;
    snap[k].w = xalloc(numel * 4), snap[k].m = xalloc(numel * 4), snap[k].v = xalloc(numel * 4);
    snap[k].mq = xalloc(numel), snap[k].vq = xalloc(numel);
    snap[k].ms = xalloc(nb * 4), snap[k].vs = xalloc(nb * 4);
    snap[k].wf = xalloc(numel * 4), snap[k].wb = xalloc(numel * 2);
    memcpy(snap[k].w, r.w, numel * 4), memcpy(snap[k].m, r.m, numel * 4), memcpy(snap[k].v, r.v, numel * 4);
    memcpy(snap[k].mq, r.mq, numel), memcpy(snap[k].vq, r.vq, numel);
    memcpy(snap[k].ms, r.ms, nb * 4), memcpy(snap[k].vs, r.vs, nb * 4);
    memcpy(snap[k].wf, r.wf, numel * 4), memcpy(snap[k].wb, r.wb, numel * 2);
  }
  float *w = xalloc(numel * 4), *wf = xalloc(numel * 4);
  uint16_t *wb = xalloc(numel * 2);
  for (eng_isa isa = ENG_ISA_SCALAR; isa <= ENG_ISA_AVX512; isa++) {
    if (!eng_isa_supported(isa)) {
      printf("  (%s not supported here: skipped)\n", eng_isa_name(isa));
      continue;
    }
    for (int threads = 1; threads <= 2; threads++) {
      omp_set_num_threads(threads);
      snprintf(cfg, sizeof cfg, "numel %zu block %d %s g %s work %s, %s, %d thread(s)", numel, block,
               quantized ? "8-bit" : "fp32-state", gbf16 ? "bf16" : "fp32",
               work == 0 ? "none" : work == 1 ? "fp32" : "bf16", eng_isa_name(isa), threads);
      eng_adamw8_state s;
      CHECK_OK(eng_adamw8_state_init(&s, numel, &o, NULL, &e), &e);
      memcpy(w, w0, numel * 4);
      for (int k = 0; k < STEPS; k++) {
        eng_adamw8_hparams h = hp0;
        h.t = k + 1;
        eng_adamw8_io io = {w, gbf16 ? (const void *)gb[k] : (const void *)g32[k],
                            gbf16 ? ENG_ADAMW8_BF16 : ENG_ADAMW8_F32, work == 0 ? NULL : work == 1 ? (void *)wf : (void *)wb,
                            work == 2 ? ENG_ADAMW8_BF16 : ENG_ADAMW8_F32, NULL, 0};
        eng_adamw8_stats st;
        CHECK_OK(eng_adamw8_update(&s, &io, &h, isa, &st, &e), &e);
        same_bits(w, snap[k].w, numel * 4, "w", cfg);
        if (work == 1) same_bits(wf, snap[k].wf, numel * 4, "fp32 working copy", cfg);
        if (work == 2) same_bits(wb, snap[k].wb, numel * 2, "bf16 working copy", cfg);
        same_state(&s, &snap[k], cfg);
        same_stats(&st, &snap[k].st, cfg);
      }
      eng_adamw8_state_free(&s);
    }
  }
  for (int k = 0; k < STEPS; k++) {
    free(g32[k]), free(gb[k]);
    free(snap[k].w), free(snap[k].m), free(snap[k].v), free(snap[k].mq), free(snap[k].vq);
    free(snap[k].ms), free(snap[k].vs), free(snap[k].wf), free(snap[k].wb);
  }
  free(r.w), free(r.m), free(r.v), free(r.mq), free(r.vq), free(r.ms), free(r.vs), free(r.wf), free(r.wb);
  free(w0), free(w), free(wf), free(wb);
}

// An fp32-state tensor (below the threshold) equals eng_adamw_update.
static void fp32_matches_adamw(void) {
  const size_t n = 3001;
  eng_err e = {0};
  eng_adamw8_state s;
  CHECK_OK(eng_adamw8_state_init(&s, n, NULL, NULL, &e), &e);
  CHECK(!s.quantized && s.m && s.v, "a tensor of %zu elements keeps fp32 state by default", n);
  float *w = xalloc(n * 4), *w2 = xalloc(n * 4), *m = xalloc(n * 4), *v = xalloc(n * 4), *g = xalloc(n * 4);
  for (size_t i = 0; i < n; i++) w[i] = w2[i] = (float)(urand() - 0.5);
  for (int k = 1; k <= STEPS; k++) {
    fill_grad(g, n, 256);
    eng_adamw8_hparams h = hp0;
    h.t = k;
    eng_adamw8_io io = {w, g, ENG_ADAMW8_F32, NULL, ENG_ADAMW8_F32, NULL, 0};
    CHECK_OK(eng_adamw8_update(&s, &io, &h, ENG_ISA_AUTO, NULL, &e), &e);
    eng_adamw_update(w2, g, m, v, n, h.lr, h.wd, h.beta1, h.beta2, h.eps, h.clip_scale, h.t);
    same_bits(w, w2, n * 4, "w", "fp32 state vs eng_adamw_update");
    same_bits(s.m, m, n * 4, "m", "fp32 state vs eng_adamw_update");
    same_bits(s.v, v, n * 4, "v", "fp32 state vs eng_adamw_update");
  }
  eng_adamw8_state_free(&s);
  free(w), free(w2), free(m), free(v), free(g);
}

// Non-finite gradients (NaN, inf, and one whose square overflows) are counted
// on every path and leave w and the working copy alone.
static void nonfinite_counted(void) {
  const size_t n = 1000;
  eng_err e = {0};
  eng_adamw8_opts o = {.min_quant_numel = 64};
  float *g = xalloc(n * 4), *w = xalloc(n * 4), *wf = xalloc(n * 4);
  for (eng_isa isa = ENG_ISA_SCALAR; isa <= ENG_ISA_AVX512; isa++) {
    if (!eng_isa_supported(isa)) continue;
    eng_adamw8_state s;
    CHECK_OK(eng_adamw8_state_init(&s, n, &o, NULL, &e), &e);
    fill_grad(g, n, 256);
    g[5] = NAN, g[300] = INFINITY, g[999] = -1e30f; // 999: the scalar tail of the last block
    for (size_t i = 0; i < n; i++) w[i] = wf[i] = 0.5f;
    eng_adamw8_io io = {w, g, ENG_ADAMW8_F32, wf, ENG_ADAMW8_F32, NULL, 0};
    eng_adamw8_stats st;
    CHECK_OK(eng_adamw8_update(&s, &io, &hp0, isa, &st, &e), &e);
    CHECK(st.nonfinite == 3, "%s: %zu non-finite gradients counted, 3 expected", eng_isa_name(isa), st.nonfinite);
    CHECK(w[5] == 0.5f && w[300] == 0.5f && w[999] == 0.5f && wf[300] == 0.5f && w[6] != 0.5f,
          "%s: skipped elements must keep their weight (%g %g %g), others move (%g)", eng_isa_name(isa),
          (double)w[5], (double)w[300], (double)w[999], (double)w[6]);
    CHECK(isfinite(st.upd_sumsq) && isfinite(st.upd_absmax), "%s: statistics stay finite", eng_isa_name(isa));
    for (size_t b = 0; b < s.nblocks; b++)
      CHECK(isfinite(s.ms[b]) && isfinite(s.vs[b]), "%s: block %zu absmax must stay finite", eng_isa_name(isa), b);
    eng_adamw8_state_free(&s);
  }
  free(g), free(w), free(wf);
}

// Saving the region and restoring it into a fresh state continues the same
// trajectory; restore refuses a wrong size and an invalid absmax.
static void save_restore(void) {
  const size_t n = 5000;
  eng_err e = {0};
  eng_adamw8_state a, b;
  CHECK_OK(eng_adamw8_state_init(&a, n, NULL, NULL, &e), &e);
  // Caller memory for the second state.
  void *mem = aligned_alloc(64, eng_adamw8_state_bytes(n, NULL));
  CHECK(mem, "out of memory");
  CHECK_OK(eng_adamw8_state_init(&b, n, NULL, mem, &e), &e);
  CHECK(a.quantized && b.bytes == a.bytes && !b.owns_mem, "two quantized states of the same shape");
  float *wa = xalloc(n * 4), *wb = xalloc(n * 4), *g = xalloc(n * 4);
  for (int k = 1; k <= 2 * STEPS; k++) {
    fill_grad(g, n, 256);
    eng_adamw8_hparams h = hp0;
    h.t = k;
    if (k == STEPS + 1) {
      CHECK_OK(eng_adamw8_state_restore(&b, a.mem, a.bytes, &e), &e);
      memcpy(wb, wa, n * 4);
    }
    eng_adamw8_io ia = {wa, g, ENG_ADAMW8_F32, NULL, ENG_ADAMW8_F32, NULL, 0};
    CHECK_OK(eng_adamw8_update(&a, &ia, &h, ENG_ISA_AUTO, NULL, &e), &e);
    if (k > STEPS) {
      eng_adamw8_io ib = {wb, g, ENG_ADAMW8_F32, NULL, ENG_ADAMW8_F32, NULL, 0};
      CHECK_OK(eng_adamw8_update(&b, &ib, &h, ENG_ISA_AUTO, NULL, &e), &e);
      same_bits(wb, wa, n * 4, "w", "after restore");
      same_bits(b.mem, a.mem, a.bytes, "state region", "after restore");
    }
  }
  CHECK(eng_adamw8_state_restore(&b, a.mem, a.bytes - 1, &e) == ENG_EINVAL && strstr(e.msg, "bytes"),
        "a saved region of the wrong size must be refused: %s", e.msg);
  unsigned char *bad = xalloc(a.bytes);
  memcpy(bad, a.mem, a.bytes);
  float nan = NAN;
  memcpy(bad + ((char *)a.vs - (char *)a.mem) + 4 * 3, &nan, sizeof nan);
  CHECK(eng_adamw8_state_restore(&b, bad, a.bytes, &e) == ENG_EINVAL && strstr(e.msg, "v absmax[3]"),
        "a NaN absmax must be refused, naming it: %s", e.msg);
  same_bits(b.mem, a.mem, a.bytes, "state region", "a refused restore leaves the state alone");
  eng_adamw8_state_free(&a);
  eng_adamw8_state_free(&b);
  free(mem), free(bad), free(wa), free(wb), free(g);
}

// A tensor in parts (data-parallel ranks): each part of whole blocks updated
// on its own state gives the whole tensor's w and state, and the parts'
// states copied back form the whole state's region bit for bit. Quantized
// (5000 elements: 20 blocks over 3 parts, the last short) and fp32 (3001).
static void parts_match_whole(void) {
  const size_t sizes[] = {5000, 3001};
  for (int z = 0; z < 2; z++) {
    const size_t n = sizes[z];
    enum { W = 3 };
    eng_err e = {0};
    eng_adamw8_state whole, part[W], back;
    CHECK_OK(eng_adamw8_state_init(&whole, n, NULL, NULL, &e), &e);
    eng_adamw8_opts po = eng_adamw8_part_opts(n, NULL);
    size_t off[W], k[W];
    for (int r = 0; r < W; r++) {
      eng_adamw8_part(n, NULL, W, r, &off[r], &k[r]);
      CHECK(off[r] % (size_t)whole.block == 0 && (r == 0 ? off[r] == 0 : off[r] == off[r - 1] + k[r - 1]),
            "part %d is not whole blocks after part %d", r, r - 1);
      CHECK_OK(eng_adamw8_state_init(&part[r], k[r], &po, NULL, &e), &e);
      CHECK(part[r].quantized == whole.quantized, "a part's state is of the whole tensor's kind");
    }
    CHECK(off[W - 1] + k[W - 1] == n, "the parts cover the tensor");
    float *wa = xalloc(n * 4), *wb = xalloc(n * 4), *g = xalloc(n * 4);
    for (int t = 1; t <= STEPS; t++) {
      fill_grad(g, n, 256);
      eng_adamw8_hparams h = hp0;
      h.t = t;
      CHECK_OK(eng_adamw8_update(&whole, &(eng_adamw8_io){wa, g, ENG_ADAMW8_F32, NULL, ENG_ADAMW8_F32, NULL, 0}, &h,
                                 ENG_ISA_AUTO, NULL, &e),
               &e);
      for (int r = 0; r < W; r++) {
        eng_adamw8_io io = {wb + off[r], g + off[r], ENG_ADAMW8_F32, NULL, ENG_ADAMW8_F32, NULL, 0};
        CHECK_OK(eng_adamw8_update(&part[r], &io, &h, ENG_ISA_AUTO, NULL, &e), &e);
      }
      same_bits(wb, wa, n * 4, "w", "parts against the whole");
    }
    CHECK_OK(eng_adamw8_state_init(&back, n, NULL, NULL, &e), &e);
    for (int r = 0; r < W; r++) eng_adamw8_state_copy(&back, off[r], &part[r], 0, k[r]);
    same_bits(back.mem, whole.mem, whole.bytes, "state region", "the parts copied into a whole state");
    eng_adamw8_state_free(&whole), eng_adamw8_state_free(&back);
    for (int r = 0; r < W; r++) eng_adamw8_state_free(&part[r]);
    free(wa), free(wb), free(g);
  }
  printf("parts: three ranks' parts update as the whole tensor does, quantized and fp32\n");
}

// Bytes per parameter from what init allocates; options and refusals.
static void memory_and_options(void) {
  eng_err e = {0};
  const size_t n = 1 << 20;
  double bpp = (double)eng_adamw8_state_bytes(n, NULL) / n;
  CHECK(bpp <= 2.05, "8-bit state costs %.4f bytes per parameter (<= 2.05 wanted)", bpp);
  CHECK(eng_adamw8_state_bytes(4095, NULL) == 2 * 4096 * 4, "below the threshold: fp32 m and v (64-aligned)");
  eng_adamw8_opts fp = {.fp32_state = 1};
  eng_adamw8_state s;
  CHECK_OK(eng_adamw8_state_init(&s, n, &fp, NULL, &e), &e);
  CHECK(!s.quantized && s.bytes == 8 * n, "fp32_state keeps fp32 state for a large tensor");
  eng_adamw8_state_free(&s);
  eng_adamw8_opts badb = {.block = 300};
  CHECK(eng_adamw8_state_init(&s, n, &badb, NULL, &e) == ENG_EINVAL && strstr(e.msg, "300"),
        "a block that is not a power of two is refused: %s", e.msg);
  CHECK(eng_adamw8_state_init(&s, n, NULL, (void *)(uintptr_t)8, &e) == ENG_EINVAL, "misaligned memory is refused");
  CHECK_OK(eng_adamw8_state_init(&s, 100, NULL, NULL, &e), &e);
  float w[100] = {0}, g[100] = {0};
  eng_adamw8_io io = {w, g, ENG_ADAMW8_F32, NULL, ENG_ADAMW8_F32, NULL, 0};
  eng_adamw8_hparams h0 = hp0;
  h0.t = 0;
  CHECK(eng_adamw8_update(&s, &io, &h0, ENG_ISA_AUTO, NULL, &e) == ENG_EINVAL && strstr(e.msg, "t = 0"),
        "step 0 is refused: %s", e.msg);
  io.g = NULL;
  CHECK(eng_adamw8_update(&s, &io, &hp0, ENG_ISA_AUTO, NULL, &e) == ENG_EINVAL, "a missing gradient is refused");
  eng_adamw8_state_free(&s);
  for (eng_isa isa = ENG_ISA_AVX2; isa <= ENG_ISA_AVX512; isa++)
    if (!eng_isa_supported(isa)) {
      CHECK_OK(eng_adamw8_state_init(&s, n, NULL, NULL, &e), &e);
      CHECK(eng_adamw8_update(&s, &(eng_adamw8_io){w, g, ENG_ADAMW8_F32, NULL, ENG_ADAMW8_F32, NULL, 0}, &hp0, isa, NULL, &e) ==
                ENG_ENOTSUP,
            "an unsupported path is refused");
      eng_adamw8_state_free(&s);
    }
}

// A gradient held by rows (an embedding's: the rows of the tokens a step
// saw, in the order it saw them) updates exactly as the whole table with
// zeros elsewhere, on every path, 8-bit and fp32 state, with rows that do
// not divide the blocks (96 values against 64 and 2048).
static void rows_match_table(void) {
  enum { VOCAB = 700, D = 96, ROWS = 40 };
  const size_t n = (size_t)VOCAB * D;
  float *g = calloc(n, sizeof *g), *gr = malloc(sizeof(float) * ROWS * D);
  int32_t row_of[VOCAB];
  for (int v = 0; v < VOCAB; v++) row_of[v] = -1;
  for (int r = 0; r < ROWS; r++) {
    int v = (int)(urand() * VOCAB);
    while (row_of[v] >= 0) v = (v + 1) % VOCAB;
    row_of[v] = r;
    for (int j = 0; j < D; j++) gr[r * D + j] = g[(size_t)v * D + j] = (float)(urand() - 0.5);
  }
  for (int fp32 = 0; fp32 < 2; fp32++)
    for (int block = 64; block <= 2048; block *= 32)
      for (eng_isa isa = ENG_ISA_SCALAR; isa <= ENG_ISA_AVX512; isa++) {
        if (!eng_isa_supported(isa)) continue;
        eng_adamw8_opts o = {.block = block, .fp32_state = fp32};
        eng_adamw8_state a, b;
        eng_err e = {0};
        CHECK_OK(eng_adamw8_state_init(&a, n, &o, NULL, &e), &e);
        CHECK_OK(eng_adamw8_state_init(&b, n, &o, NULL, &e), &e);
        float *wa = malloc(sizeof(float) * n), *wb = malloc(sizeof(float) * n);
        for (size_t i = 0; i < n; i++) wa[i] = wb[i] = (float)(urand() - 0.5);
        for (int t = 1; t <= 3; t++) {
          eng_adamw8_hparams h = hp0;
          h.t = t;
          eng_adamw8_io ia = {.w = wa, .g = g, .g_type = ENG_ADAMW8_F32};
          eng_adamw8_io ib = {.w = wb, .g = gr, .g_type = ENG_ADAMW8_F32, .g_rows = row_of, .g_row_len = D};
          CHECK_OK(eng_adamw8_update(&a, &ia, &h, isa, NULL, &e), &e);
          CHECK_OK(eng_adamw8_update(&b, &ib, &h, isa, NULL, &e), &e);
        }
        CHECK(memcmp(wa, wb, sizeof(float) * n) == 0, "by rows = the table (%s, block %d, %s state)",
              eng_isa_name(isa), block, fp32 ? "fp32" : "8-bit");
        eng_adamw8_io bad = {.w = wb, .g = gr, .g_type = ENG_ADAMW8_BF16, .g_rows = row_of, .g_row_len = D};
        CHECK(eng_adamw8_update(&b, &bad, &hp0, isa, NULL, &e) == ENG_EINVAL, "bf16 rows are refused");
        free(wa), free(wb);
        eng_adamw8_state_free(&a), eng_adamw8_state_free(&b);
      }
  free(g), free(gr);
}

int main(void) {
  // Sizes: not multiples of 16 (scalar tails), of the block, and one large
  // enough for the parallel region (>= 32768 elements in a round).
  run_config(5000, 256, 0, 0, 0);
  run_config(5000, 256, 0, 1, 2);
  run_config(5000, 256, 0, 0, 1);
  run_config(5000, 256, 0, 1, 0);
  run_config(70001, 256, 0, 1, 2);
  run_config(70001, 256, 0, 0, 1);
  run_config(9000, 2048, 0, 1, 2);
  run_config(1000, 64, 64, 0, 2);
  run_config(40000, 64, 64, 1, 2); // 625 blocks: chunks of 2 and 3 blocks
  run_config(3001, 256, 0, 1, 2);  // below the threshold: fp32 state
  run_config(3001, 256, 0, 0, 1);
  fp32_matches_adamw();
  nonfinite_counted();
  save_restore();
  parts_match_whole();
  memory_and_options();
  rows_match_table();
  printf("adamw8: ok\n");
  return 0;
}
