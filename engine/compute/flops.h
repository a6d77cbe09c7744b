// FLOP accounting (DESIGN §8): what one training step of a model costs,
// counted two ways. The planner's cost model (plan/cost.c) times the same
// counts, so a plan's predicted step and a run's measured FLOPs agree.
//
// Model FLOPs follow PaLM's convention (Chowdhery et al. 2022, appendix B),
// the one MFU figures are quoted in: per token 6·N + 12·L·H·Q·T, where N is
// the parameters of the matrix products every token passes through (each
// layer's projections and the LM head, tied or not; not the embedding
// lookup, not the norms), L layers, H query heads of Q dimensions, T the
// sequence length (attention counted as if not causal). They depend on the
// model and the tokens only, so two methods compare at equal model FLOPs.
//
// Executed FLOPs are what the engine computes: causal attention (half the
// square) with flash-attention's backward at 2.5 times its forward, the
// layers' forwards that recompute runs again, and under POET-X the block
// rotations, their Cayley maps and merges, and no dW0 product.
#ifndef ENG_COMPUTE_FLOPS_H
#define ENG_COMPUTE_FLOPS_H

#include "common/err.h"
#include "model/config.h"
#include "poet/state.h"

// Flash-attention's convention: the backward does 2.5 times the forward's
// FLOPs (five matrix products against two).
#define ENG_FLOPS_ATTN_BWD_RATIO 2.5
// The gated delta rule's backward replays each chunk's forward from its
// boundary state and then takes about twice its products.
#define ENG_FLOPS_DN_BWD_RATIO 3.0

// One layer's forward on `seqs` sequences of T tokens, a layer of kind
// (model/layout.h's: attention, or a hybrid's Gated DeltaNet).
typedef struct eng_layer_flops {
  double gemm; // the projections: 2 FLOPs per token per weight (a DN layer's conv taps count)
  double mix;  // the token mixing: causal QKᵀ and PV, 2·T·T·Q per head per sequence (under
               // a sliding window, 4·Q per visible query-key pair); or
               // the delta rule's three products with each value head's state [dk, dv]
               // (read Sᵀk, write k·uᵀ, output Sᵀq), 6·dk·dv per head per token
  double mix_bwd_ratio; // the backward's mixing FLOPs over the forward's
} eng_layer_flops;
eng_layer_flops eng_flops_layer_fwd(const eng_config *c, int kind, double seqs, double T);

// POET-X's work in one layer beyond a plain layer's, for n tokens
// (poet/poet.h). Each weight [m, n] rotates its input and output by blocks
// of b: 2·n·b·(in + out) forward; the backward recomputes the input
// rotation, rotates the gradient back through both sides and forms both
// sides' dL/dR (2·n·b·(3·in + 2·out)), and in memory mode recomputes the
// inner product z = v·W0ᵀ (2·n·in·out). Once per step the rotations come
// from θ (three b×b products per block, about four times that backward);
// a merge rotates every weight's rows and columns.
typedef struct eng_poet_flops {
  double fwd, bwd;           // the block rotations
  double z_bwd;              // memory mode's recomputed z (a plain product)
  double cayley, cayley_bwd; // the b×b products
  double merge;              // one merge of the layer
} eng_poet_flops;
eng_poet_flops eng_flops_poet_layer(const eng_poet_model *pm, double n, int fast);

// One step of `batch` sequences of seq_len tokens.
typedef struct eng_step_flops {
  double model;     // PaLM's model FLOPs
  double exec;      // executed, before recompute and merges
  double refwd;     // executed by one layer's forward on one sequence (a
                    // recompute of l layers over s sequences runs l·s of it)
  double merge;     // POET-X: one merge of every layer (0 otherwise)
  double fwd;       // executed by a forward of the batch alone (scoring; its model
                    // FLOPs are a third of `model`: 2N + 4·L·H·Q·T per token)
} eng_step_flops;
// poet_block > 0: POET-X with blocks of that size, poet_fast keeping the
// inner products (0: memory mode). Fails naming the weight a block does not
// divide.
int eng_flops_step(const eng_config *c, int batch, int seq_len, int poet_block, int poet_fast,
                   eng_step_flops *out, eng_err *e);

#endif
