// Host-resident model state: per shard (DESIGN §2), the fp32 master weights,
// the host gradient store and the optimizer moments. Shards are separate
// 64-byte aligned allocations so each streams and updates as a unit.
#ifndef ENG_MODEL_MODEL_H
#define ENG_MODEL_MODEL_H

#include <stdint.h>

#include "model/config.h"
#include "model/layout.h"
#include "optim/adamw8.h"
#include "poet/state.h"

// Tensors of one shard: at most the layer's parameters.
#define ENG_SHARD_MAX_TENSORS ENG_P_LAYER_COUNT

typedef struct eng_shard {
  size_t numel;
  float *w;        // fp32 master weights: w_numel values, tensor i's at w_off[i] (its layout
                   // offset, unless a bf16 base holds the frozen tensors: then the others'
                   // are packed and the frozen are in base, SIZE_MAX; or unless w_part)
  int w_part;      // 1: w holds only the elements of each tensor whose optimizer state this
                   // process holds ([opt_off[i], + opt[i].numel), packed at w_off[i]); the
                   // whole model is the working copy's (eng_model_opts.work_bf16 with opt_parts)
  size_t w_numel;
  size_t w_off[ENG_SHARD_MAX_TENSORS];
  uint16_t *base;  // POET-X with a bf16 base (eng_model_opts.poet_base_bf16): numel bf16
                   // values, the frozen tensors' (W0, biases) at their layout offsets; else NULL
  void *g;         // gradient store, written by the backward's copy-out: g_numel values, tensor i's
                   // at g_off[i] (its layout offset, unless some tensors are frozen: then the
                   // others' are packed and the frozen have none, SIZE_MAX)
  size_t g_numel;
  size_t g_off[ENG_P_LAYER_COUNT];
  uint16_t *work;  // bf16 working copy that streams (eng_model_opts.work_bf16), written by
                   // each update; NULL: w streams
  int g_bf16;      // 1: g holds bf16 bits (uint16_t), 0: fp32
  int n_tensors;   // tensors of the shard (embedding; layer params; final norm, lm_head)
  eng_tensor tensors[ENG_SHARD_MAX_TENSORS];
  eng_adamw8_state opt[ENG_SHARD_MAX_TENSORS]; // optimizer state of each tensor (none when frozen);
                                               // with opt parts, of elements [opt_off[i], + opt[i].numel)
  size_t opt_off[ENG_SHARD_MAX_TENSORS];
  uint8_t frozen[ENG_SHARD_MAX_TENSORS];       // not trained: POET-X's W0 and biases
} eng_shard;

// How the host state is held.
typedef struct eng_model_opts {
  int grad_bf16;          // gradient store in bf16 (the embedding's stays fp32)
  int opt_fp32;           // fp32 moments for every tensor (exact torch AdamW)
  size_t opt_min_quant;   // 8-bit moments from this many elements (0: ENG_ADAMW8_MIN_QUANT)
  int opt_fp32_embed_head; // fp32 moments for the embedding and lm_head
  int work_bf16;          // keep a bf16 working copy of every shard, which is what computes (the
                          // cuda backend; the cpu's eng_spec.work_bf16)
  int poet_block;         // POET-X with this block size (poet/state.h); 0: every tensor trains
  int poet_base_bf16;     // POET-X: its frozen tensors held in bf16 (half the bytes; a merge
                          // rounds the new W0), not in the fp32 master; cpu backend only
  int embed_rows;         // the most tokens a step has: an untied embedding's gradient store holds
                          // that many rows (a step touches no more), not the vocabulary's; 0: all
  int opt_parts, opt_part; // data parallel (ZeRO-1): each tensor's optimizer state only for part
                          // opt_part of opt_parts (eng_adamw8_part); 0 parts: the whole. With a
                          // working copy the fp32 master is held for that part only (w_part)
} eng_model_opts;

typedef struct eng_model {
  eng_config cfg;
  eng_layout lo;
  eng_shard *shards; // lo.n_shards entries
  eng_poet_model poet; // POET-X: poet.layers non-NULL; its W0 and biases are frozen in the shards
  // The embedding's gradient by rows (eng_model_opts.embed_rows): shard 0's g
  // holds rows_cap rows, the first rows_used of them the tokens the step has
  // seen, in the order it saw them: row_of[v] token v's row (-1: none, a zero
  // gradient), token_of[r] row r's token. NULL: g is the whole table.
  int32_t *row_of, *token_of;
  int rows_cap, rows_used;
} eng_model;

// Allocates every shard (weights, gradients, optimizer state zeroed), and
// under POET-X its state (identity permutations). Fails with ENG_ENOMEM
// naming the bytes that could not be allocated, or ENG_EINVAL when the
// block size does not fit a weight.
int eng_model_alloc(eng_model *m, const eng_config *c, const eng_model_opts *o, eng_err *e);
void eng_model_free(eng_model *m);

// Bytes allocated for optimizer state (every tensor's region, as allocated),
// and for the gradient store (with the embedding's maps between rows and
// tokens).
size_t eng_model_opt_bytes(const eng_model *m);
size_t eng_model_grad_bytes(const eng_model *m);
// Bytes allocated for the fp32 master weights (and a bf16 base).
size_t eng_model_master_bytes(const eng_model *m);

// Gradient of shard s's tensor t as fp32 into dst (converting a bf16 store,
// spreading the embedding's rows).
void eng_model_grad_get(const eng_model *m, int s, const eng_tensor *t, float *dst);

// The embedding's gradient store (shard 0's, fp32), which the backward
// fills: reset to zero (the rows in use, or the table); the rows of dx [n,
// d_model] added to the rows of their tokens ids, eng_k_embed_bwd's sums, or
// with group > 0 eng_k_embed_bwd_group's over each run of group tokens (a
// micro-batch; ENG_ESTATE if the store has no row left: more tokens than a
// step has);
// and the floats of it in use, which hold every nonzero value.
void eng_model_embed_grad_reset(eng_model *m);
int eng_model_embed_grad_add(eng_model *m, const float *dx, const int32_t *ids, int n, int group, eng_err *e);
size_t eng_model_embed_grad_floats(const eng_model *m);

// Random init as transformers does for these models: linear weights and the
// embedding ~ N(0, init_std), norm weights 1, biases 0. Each tensor draws
// from its own RNG stream of the seed, so the result is independent of order.
// Under POET-X the frozen W0 of the decoder layers then have each row scaled
// to unit norm, as the method starts from scratch (and then rounded, in a
// bf16 base). Fails only for the scratch a bf16 base needs.
int eng_model_init_random(eng_model *m, uint64_t seed, eng_err *e);

// Rewrites every working copy from the fp32 master (after init or a load;
// updates keep it current themselves). Nothing to do without working copies,
// nor where the master is in parts (w_part: eng_model_tensor_set and
// eng_model_shard_set write the working copy themselves).
void eng_model_work_refresh(eng_model *m);

// Pointer to tensor t of shard s inside the fp32 master weights; NULL for a
// tensor of a bf16 base, or of a master in parts.
float *eng_model_tensor(eng_model *m, int s, const eng_tensor *t);
// Tensor t of shard s as fp32 values, wherever it is held (a bf16 base's
// exactly widened; set rounds to nearest even there). Under w_part no process
// holds the whole master: get is not for it (dist_run.c gathers the parts),
// set keeps the part and writes the whole working copy.
void eng_model_tensor_get(const eng_model *m, int s, const eng_tensor *t, float *dst);
void eng_model_tensor_set(eng_model *m, int s, const eng_tensor *t, const float *src);
// Shard s whole in its layout's fp32 (numel values, each tensor at its
// offset), as it streams, checkpoints and exports; and back.
void eng_model_shard_get(const eng_model *m, int s, float *dst);
void eng_model_shard_set(eng_model *m, int s, const float *src);

// Host bytes of the model state of config c with options o, by part, as
// eng_model_alloc would take them (computed without allocating): -1 when
// the options do not fit the config (eng_model_alloc says why).
typedef struct eng_model_bytes {
  size_t master; // fp32 master weights, and a bf16 base (POET-X: its frozen W0)
  size_t grad;   // gradient store (none for frozen tensors)
  size_t opt;    // optimizer moments (none for frozen tensors)
  size_t work;   // bf16 working copy (eng_model_opts.work_bf16)
  size_t poet;   // POET-X: θ, its moments and gradients, permutations, merge work
} eng_model_bytes;
int eng_model_state_parts(const eng_config *c, const eng_model_opts *o, eng_model_bytes *b);

// Bytes of host memory the model state of config c takes with options o
// (weights, gradient store, optimizer moments, working copy, POET-X's
// state), computed without allocating: what eng_model_alloc would take. 0
// when the options do not fit the config (eng_model_alloc says why).
size_t eng_model_state_bytes(const eng_config *c, const eng_model_opts *o);

#endif
