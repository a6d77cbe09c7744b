#include "optim/adamw8.h"

#include <stdlib.h>
#include <string.h>

#include "optim/adamw8_impl.h"

// BLOCK-SIZE NOTE (filled in from tests/bench/optim_block.c)

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

static void resolve_opts(const eng_adamw8_opts *o, size_t numel, int *block, int *quantized) {
  size_t min = o && o->min_quant_numel ? o->min_quant_numel : ENG_ADAMW8_MIN_QUANT;
  *block = o && o->block ? o->block : ENG_ADAMW8_BLOCK;
  *quantized = !(o && o->fp32_state) && numel >= min;
}

static int block_ok(int b) { return b >= 64 && b <= ENG_ADAMW8_BLOCK_MAX && (b & (b - 1)) == 0; }

size_t eng_adamw8_state_bytes(size_t numel, const eng_adamw8_opts *o) {
  int block, quantized;
  resolve_opts(o, numel, &block, &quantized);
  if (!quantized) return 2 * align64(numel * sizeof(float));
  size_t nblocks = (numel + (size_t)block - 1) / (size_t)block;
  return 2 * align64(numel) + 2 * align64(nblocks * sizeof(float));
}

int eng_adamw8_state_init(eng_adamw8_state *s, size_t numel, const eng_adamw8_opts *o, void *mem,
                          eng_err *e) {
  memset(s, 0, sizeof *s);
  int block, quantized;
  resolve_opts(o, numel, &block, &quantized);
  if (!block_ok(block))
    return eng_err_set(e, ENG_EINVAL, "adamw8: block %d is not a power of two in [64, %d]", block,
                       ENG_ADAMW8_BLOCK_MAX);
  if (mem && ((uintptr_t)mem & 63))
    return eng_err_set(e, ENG_EINVAL, "adamw8: state memory %p is not 64-byte aligned", mem);
  size_t bytes = eng_adamw8_state_bytes(numel, o);
  if (!mem) {
    mem = aligned_alloc(64, bytes ? bytes : 64);
    if (!mem)
      return eng_err_set(e, ENG_ENOMEM, "adamw8: out of memory for the state of %zu elements (%zu bytes)",
                         numel, bytes);
    s->owns_mem = 1;
  }
  memset(mem, 0, bytes);
  s->numel = numel;
  s->quantized = quantized;
  s->block = block;
  s->nblocks = (numel + (size_t)block - 1) / (size_t)block;
  s->mem = mem;
  s->bytes = bytes;
  char *p = mem;
  if (quantized) {
    s->mq = (uint8_t *)p;
    s->vq = (uint8_t *)(p += align64(numel));
    s->ms = (float *)(p += align64(numel));
    s->vs = (float *)(p + align64(s->nblocks * sizeof(float)));
  } else {
    s->m = (float *)p;
    s->v = (float *)(p + align64(numel * sizeof(float)));
  }
  return ENG_OK;
}

void eng_adamw8_state_free(eng_adamw8_state *s) {
  if (s->owns_mem) free(s->mem);
  memset(s, 0, sizeof *s);
}

int eng_adamw8_state_restore(eng_adamw8_state *s, const void *data, size_t bytes, eng_err *e) {
  if (bytes != s->bytes)
    return eng_err_set(e, ENG_EINVAL,
                       "adamw8: saved state has %zu bytes; a %s state of %zu elements has %zu",
                       bytes, s->quantized ? "8-bit" : "fp32", s->numel, s->bytes);
  // Check the copy before installing it: same offsets as s's arrays.
  const char *base = data;
  const float *a = (const float *)(base + ((const char *)(s->quantized ? s->ms : s->m) - (char *)s->mem));
  const float *b = (const float *)(base + ((const char *)(s->quantized ? s->vs : s->v) - (char *)s->mem));
  size_t n = s->quantized ? s->nblocks : s->numel;
  for (size_t i = 0; i < n; i++) {
    float x, y;
    memcpy(&x, a + i, sizeof x);
    memcpy(&y, b + i, sizeof y);
    if (!isfinite(x) || (s->quantized && x < 0.0f))
      return eng_err_set(e, ENG_EINVAL, "adamw8: saved state: %s[%zu] = %g is not a valid %s",
                         s->quantized ? "m absmax" : "m", i, (double)x,
                         s->quantized ? "absmax" : "first moment");
    if (!isfinite(y) || y < 0.0f)
      return eng_err_set(e, ENG_EINVAL, "adamw8: saved state: %s[%zu] = %g is not a valid %s",
                         s->quantized ? "v absmax" : "v", i, (double)y,
                         s->quantized ? "absmax" : "second moment");
  }
  memcpy(s->mem, data, bytes);
  return ENG_OK;
}

// ---- block kernels -----------------------------------------------------------

void eng_adamw8_blk_fp32(const aw8_args *a, size_t b, aw8_bstat *st) {
  const eng_adamw8_state *s = a->s;
  const size_t i0 = b * (size_t)s->block, n = aw8_block_len(s, b);
  aw8_acc acc = {0};
  for (size_t j = 0; j < n; j++) aw8_elem(a, i0 + j, j, &s->m[i0 + j], &s->v[i0 + j], &acc);
  aw8_finish(&acc, st);
}

void eng_adamw8_blk_scalar(const aw8_args *a, size_t b, aw8_bstat *st) {
  const eng_adamw8_state *s = a->s;
  const size_t i0 = b * (size_t)s->block, n = aw8_block_len(s, b);
  const float sm = s->ms[b], sv = s->vs[b];
  // The new moments wait here until the block's new absmax is known.
  float mb[ENG_ADAMW8_BLOCK_MAX], vb[ENG_ADAMW8_BLOCK_MAX];
  aw8_acc acc = {0};
  for (size_t j = 0; j < n; j++) {
    mb[j] = a->qm->value[s->mq[i0 + j]] * sm;
    vb[j] = a->qv->value[s->vq[i0 + j]] * sv;
    aw8_elem(a, i0 + j, j, &mb[j], &vb[j], &acc);
  }
  const float nm = eng_q8_block_absmax(acc.am), nv = eng_q8_block_absmax(acc.av);
  const float im = eng_q8_inv(nm), iv = eng_q8_inv(nv);
  for (size_t j = 0; j < n; j++) {
    s->mq[i0 + j] = eng_q8_encode(a->qm, mb[j] * im);
    s->vq[i0 + j] = eng_q8_encode(a->qv, vb[j] * iv);
  }
  s->ms[b] = nm;
  s->vs[b] = nv;
  aw8_finish(&acc, st);
}

// ---- the pass ----------------------------------------------------------------

int eng_adamw8_update(eng_adamw8_state *s, const eng_adamw8_io *io, const eng_adamw8_hparams *h,
                      eng_isa isa, eng_adamw8_stats *st, eng_err *e) {
  const eng_isa path = eng_isa_resolve(isa);
  if (path == ENG_ISA_AUTO)
    return eng_err_set(e, ENG_ENOTSUP, "adamw8: the %s code path is not supported on this CPU",
                       eng_isa_name(isa));
  // fp32 state: plain C for every path (small tensors; the compiler vectorises it).
  aw8_block_fn fn = !s->quantized ? eng_adamw8_blk_fp32 : eng_adamw8_blk_scalar;
#if defined(__x86_64__)
  if (s->quantized && path == ENG_ISA_AVX2) fn = eng_adamw8_blk_avx2;
  if (s->quantized && path == ENG_ISA_AVX512) fn = eng_adamw8_blk_avx512;
#endif
  aw8_args a = {
      .s = s,
      .qm = eng_q8_signed(),
      .qv = eng_q8_unsigned(),
      .c = eng_adamw_coef_make(h->lr, h->wd, h->beta1, h->beta2, h->eps, h->clip_scale, h->t),
      .w = io->w,
      .gf = io->g_type == ENG_ADAMW8_F32 ? io->g : NULL,
      .gb = io->g_type == ENG_ADAMW8_BF16 ? io->g : NULL,
      .wf = io->work && io->work_type == ENG_ADAMW8_F32 ? io->work : NULL,
      .wb = io->work && io->work_type == ENG_ADAMW8_BF16 ? io->work : NULL,
  };
  // Block statistics of a round of blocks live on the stack (no allocation);
  // rounds, and blocks within a round, add in order.
  enum { ROUND = 2048, PAR_MIN = 32768 };
  aw8_bstat part[ROUND];
  double sumsq = 0.0;
  float amax = 0.0f;
  size_t nonfinite = 0;
  for (size_t r0 = 0; r0 < s->nblocks; r0 += ROUND) {
    const int nb = (int)(s->nblocks - r0 < ROUND ? s->nblocks - r0 : ROUND);
#pragma omp parallel for schedule(static) if ((size_t)nb * (size_t)s->block >= PAR_MIN)
    for (int b = 0; b < nb; b++) fn(&a, r0 + (size_t)b, &part[b]);
    for (int b = 0; b < nb; b++) {
      sumsq += part[b].sumsq;
      amax = aw8_max(part[b].amax, amax);
      nonfinite += part[b].nonfinite;
    }
  }
  if (st) *st = (eng_adamw8_stats){sumsq, amax, nonfinite};
  return ENG_OK;
}
