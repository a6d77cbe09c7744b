// AdamW with block-wise 8-bit state (DESIGN §2 step 4): per tensor,
// the first moment m is stored as signed-map codes and the second moment as
// unsigned-map codes of its square root r = sqrt(v) (optim/q8map.h), one byte
// each per parameter, plus one fp32 absmax per block of each. Tensors below a
// size threshold (norm weights and the like), or when asked, keep fp32 m and
// v instead.
//
// Why sqrt(v) and not v: v spans the square of the gradients' dynamic range,
// so in a block where gradient magnitudes differ by 10^4 (outlier columns), v
// differs by 10^8, past the map's 10^-7 floor, and small v become 0 while
// their m does not: the update m / (sqrt(v) + eps) then explodes to m / eps.
// The root spans the gradients' own range and is what the update divides by,
// so its quantization error is the denominator's. Measured with
// tests/bench/optim_block.c (block 256; relative RMS error of the update
// against fp32 state, log-normal column scales of sigma 0.5 / 1 / 1.5 / 2):
// storing v 0.047 / 0.085 / 2.03 / 26.7, storing sqrt(v) 0.052 / 0.072 /
// 0.110 / 0.170. It costs one multiply (r * r) per element: the root is the
// one the denominator computes anyway.
//
// One fused pass per tensor (eng_adamw8_update) streams through memory once:
// per block it dequantizes m and sqrt(v), scales the gradient by the clip
// factor, runs the AdamW arithmetic of optim/adamw.h (same formulas, same
// scalars: eng_adamw_coef), updates the fp32 master weight, writes the working
// copy, then requantizes m and sqrt(v) with the block's new absmaxes to the
// nearest code. An fp32-state tensor gives exactly what eng_adamw_update gives.
//
// Determinism: blocks are independent and every path (scalar, AVX2, AVX-512)
// does the same roundings in the same order (no FMA, real sqrt and division),
// so results do not depend on the path or the thread count; statistics are
// per-block partials combined in a fixed order (eng_adamw8_stats).
#ifndef ENG_OPTIM_ADAMW8_H
#define ENG_OPTIM_ADAMW8_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/isa.h"

// Elements per absmax block: 256 rather than 2048, for accuracy; the
// measurements are in adamw8.c.
#define ENG_ADAMW8_BLOCK 256
#define ENG_ADAMW8_BLOCK_MAX 4096
// Tensors with fewer elements keep fp32 state (bitsandbytes' threshold too).
#define ENG_ADAMW8_MIN_QUANT 4096

// Options of one tensor's state; all-zero means the defaults.
typedef struct eng_adamw8_opts {
  size_t min_quant_numel; // quantize when numel >= this; 0: ENG_ADAMW8_MIN_QUANT
  int block;              // absmax block: power of two in [64, ENG_ADAMW8_BLOCK_MAX]; 0: ENG_ADAMW8_BLOCK
  int fp32_state;         // nonzero: fp32 m and v whatever the size
} eng_adamw8_opts;

// One tensor's optimizer state. All arrays live in one zero-initialised,
// 64-byte aligned region `mem` of `bytes` bytes, laid out in this order, each
// array starting on a 64-byte boundary (padding stays zero):
//   quantized: mq[numel], vq[numel] (uint8 codes), ms[nblocks], vs[nblocks] (fp32)
//   fp32:      m[numel], v[numel] (fp32)
// The region is the checkpoint form: save its bytes as they are, restore with
// eng_adamw8_state_restore into a state initialised with the same numel and
// options (host byte order: little-endian fp32).
typedef struct eng_adamw8_state {
  size_t numel;
  int quantized;    // 1: codes + absmax; 0: fp32 m and v
  int block;        // elements per block (also the unit of work and of statistics)
  size_t nblocks;   // ceil(numel / block)
  uint8_t *mq, *vq; // quantized: codes of m (signed map) and sqrt(v) (unsigned map); else NULL
  float *ms, *vs;   // quantized: absmax of each block of m and of sqrt(v); else NULL
  float *m, *v;     // fp32 state; else NULL
  void *mem;        // the region holding all of the above
  size_t bytes;     // its size: eng_adamw8_state_bytes(numel, opts)
  int owns_mem;     // 1: init allocated mem and free releases it
} eng_adamw8_state;

// Bytes of the state region for numel elements with these options (NULL:
// defaults): everything the optimizer state allocates for the tensor.
size_t eng_adamw8_state_bytes(size_t numel, const eng_adamw8_opts *o);

// Initialises s to zero state (m = v = 0). mem NULL: the region is allocated
// here and owned by s. Else mem is the caller's: 64-byte aligned, at least
// eng_adamw8_state_bytes bytes, outliving s; it is zeroed, never freed here.
// Errors: ENG_EINVAL (bad block, misaligned mem), ENG_ENOMEM.
int eng_adamw8_state_init(eng_adamw8_state *s, size_t numel, const eng_adamw8_opts *o, void *mem,
                          eng_err *e);
// Releases what init allocated (nothing for caller memory); s becomes empty.
void eng_adamw8_state_free(eng_adamw8_state *s);

// Copies a saved region (the bytes of s->mem of a state of the same numel and
// options) into s; data may be s->mem itself (read there in place, then vetted). Refuses, leaving s unchanged, a size that differs or state
// that could not have been saved (a non-finite or negative absmax or fp32
// second moment, a non-finite fp32 first moment), naming the element.
int eng_adamw8_state_restore(eng_adamw8_state *s, const void *data, size_t bytes, eng_err *e);

// ---- a tensor's state in parts (data-parallel ranks, each updating one) ----
// Blocks are independent, so a part of whole blocks updated on its own gives
// the bits the whole tensor's pass gives there. Part `rank` of `world` of a
// tensor of numel elements: [*off, *off + *n), whole blocks, the parts in
// rank order (the last ones may be shorter or empty).
void eng_adamw8_part(size_t numel, const eng_adamw8_opts *o, int world, int rank, size_t *off, size_t *n);
// The options a part's state is made with: the whole tensor's block and its
// choice of quantized or fp32 state, whatever the part's size.
eng_adamw8_opts eng_adamw8_part_opts(size_t numel, const eng_adamw8_opts *o);
// Copies the state of elements [src_off, src_off + n) of src to dst from
// dst_off: both offsets whole blocks, src and dst of the same kind (block,
// quantized or fp32).
void eng_adamw8_state_copy(eng_adamw8_state *dst, size_t dst_off, const eng_adamw8_state *src, size_t src_off,
                           size_t n);

typedef enum { ENG_ADAMW8_F32 = 0, ENG_ADAMW8_BF16 = 1 } eng_adamw8_dtype;

// Hyperparameters of one step, as eng_adamw_update takes them. clip_scale
// multiplies the gradient first; t is the 1-based step count.
typedef struct eng_adamw8_hparams {
  float lr, wd, beta1, beta2, eps, clip_scale;
  int64_t t;
} eng_adamw8_hparams;

// The tensor a pass updates; all arrays have numel elements and do not overlap.
typedef struct eng_adamw8_io {
  float *w;                   // fp32 master weights, updated in place
  const void *g;              // gradient (float or bf16 bits as uint16_t), read only
  eng_adamw8_dtype g_type;
  void *work;                 // working copy written from the new w; NULL: none
  eng_adamw8_dtype work_type; // fp32 (the cpu backend) or bf16, rounded to nearest even
  const int32_t *g_rows;      // NULL, or g by rows of g_row_len elements (fp32, an embedding's):
  size_t g_row_len;           // row r is g's row g_rows[r], zero where that is -1
} eng_adamw8_io;

// What one pass did. An element whose clipped gradient, or new second
// moment, is not finite is skipped and counted: its w and moments keep their
// old values (the moments are requantized with the block's new absmaxes; the
// working copy is written from w as for any element). The engine skips a step whose gradient norm is not finite
// before calling the pass; the count is what the pass saw.
typedef struct eng_adamw8_stats {
  double upd_sumsq;  // Σ (w_new - w_old)² in a fixed order: per block, 16 fp32
                     // lanes (element j of the block in lane j % 16) added in lane
                     // order in double; the blocks split into min(nblocks, 256)
                     // chunks, chunk k holding blocks [k·nb/nc, (k+1)·nb/nc);
                     // blocks add in order within a chunk, chunks in order
  float upd_absmax;  // max |w_new - w_old|
  size_t nonfinite;  // elements skipped
} eng_adamw8_stats;

// The fused update of one tensor: parallel over blocks with OpenMP, no
// allocation. isa: ENG_ISA_AUTO, or a path to force (tests); ENG_ENOTSUP
// when that path is not supported here, ENG_EINVAL for a missing array, an
// unknown dtype or t < 1 (nothing is updated then). st may be NULL.
int eng_adamw8_update(eng_adamw8_state *s, const eng_adamw8_io *io, const eng_adamw8_hparams *h,
                      eng_isa isa, eng_adamw8_stats *st, eng_err *e);

#endif
