// A model's POET-X state (issue 16): for every decoder layer, the θ of its
// seven weights (both sides), θ's Adam moments and gradient store, and the
// weights' permutations. The weights W0 themselves are the layer shards'
// own tensors (model/layout.h), frozen, as are the biases; norms, the
// embedding and the head train with AdamW as before. Host memory, in one
// allocation per layer.
//
// A layer's θ are laid out weight by weight in eng_poet_weights order (q, k,
// v, o, gate, up, down), each the input side's blocks then the output
// side's (poet.h); its permutations likewise, pin then pout.
#ifndef ENG_POET_STATE_H
#define ENG_POET_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/rng.h"
#include "model/layout.h"
#include "optim/adamw8.h"
#include "poet/poet.h"

// The layer parameter of each POET weight, and its bias (ENG_P_LAYER_COUNT:
// none).
extern const eng_layer_param eng_poet_param[ENG_POET_WEIGHTS];
extern const eng_layer_param eng_poet_bias[ENG_POET_WEIGHTS];

typedef struct eng_poet_lstate {
  float *theta;               // [n_theta]
  void *g;                    // [n_theta] gradients: bf16 bits (uint16_t) when g_bf16, else fp32
  eng_adamw8_state opt;       // θ's Adam moments (8-bit or fp32, as the model's options say)
  int32_t *perm;              // [n_perm]
  int64_t merged;             // the number of the last merge (0: none yet)
  double merge_err;           // the largest orthogonality error that merge folded in
} eng_poet_lstate;

typedef struct eng_poet_model {
  int b, n_layers;
  int g_bf16;                                   // θ's gradients are stored in bf16
  eng_adamw8_opts opt_opts;                     // θ's moments: 8-bit, or fp32 (fp32_state)
  size_t n_theta, n_perm;                       // per layer
  size_t theta_off[ENG_POET_WEIGHTS][2];        // in, out: offsets into a layer's θ
  size_t perm_off[ENG_POET_WEIGHTS][2];         // pin, pout
  int dim[ENG_POET_WEIGHTS][2];                 // n (in), m (out)
  eng_poet_lstate *layers;                      // [n_layers]
  float *merge_work;                            // eng_poet_model_merge_floats: merges, exports
} eng_poet_model;

// Checks that the model has no Gated DeltaNet layers (ENG_ENOTSUP) and that
// block b divides both dimensions of every weight (the error names the first
// tensor it does not), then sizes pm without allocating.
int eng_poet_model_shape(eng_poet_model *pm, const eng_layout *lo, int b, eng_err *e);
// Host bytes of the state eng_poet_model_alloc takes (with the work of a
// merge, which runs on one thread at a time: the update's).
size_t eng_poet_model_bytes(const eng_poet_model *pm);
// Allocates the state of a shaped pm (g_bf16 and opt_opts set as
// wanted after eng_poet_model_shape): θ, moments and gradients zero, every
// permutation the identity.
int eng_poet_model_alloc(eng_poet_model *pm, eng_err *e);
void eng_poet_model_free(eng_poet_model *pm);
// Random permutations for every weight, from the seed alone (one stream
// per weight), so a run's start does not depend on anything else.
void eng_poet_model_perms(eng_poet_model *pm, uint64_t seed);

// Whether perm[0..n) holds each of 0..n-1 once.
int eng_poet_is_perm(const int32_t *perm, size_t n);
// Whether every permutation of layer l is one (after a checkpoint's read).
int eng_poet_model_perms_ok(const eng_poet_model *pm, int l);

// Views of layer l for exec/layer.c: permutations, and the caller's buffers
// for the rotations (eng_poet_model_rot_floats: every weight's R_in then
// R_out, computed from θ by eng_poet_model_rotations) and dL/dR (the same
// size, zeroed by the caller before the layer's backward).
size_t eng_poet_model_rot_floats(const eng_poet_model *pm);
void eng_poet_model_rotations(const eng_poet_model *pm, int l, float *rot, float *work);
void eng_poet_model_layer(const eng_poet_model *pm, int l, const float *rot, float *drot, float *work,
                          eng_poet_layer *out);
// Layer l's θ gradient (g, rounded to nearest even where it is bf16) from
// its dL/dR; returns Σ g² of what g holds (in double). work:
// eng_poet_model_grad_floats.
static inline size_t eng_poet_model_grad_floats(int b) { return 6 * (size_t)b * b + eng_poet_tri(b); }
double eng_poet_model_grad(eng_poet_model *pm, int l, const float *drot, float *work);
// Merge-then-reinitialise layer l (w: its layer shard's fp32 weights, or
// base: its bf16 base, where the W0 are then): every weight's W0 becomes its
// effective weight under new permutations drawn for (seed, merge, l),
// rounded to nearest even in a bf16 base; θ and its moments return to zero. Returns the largest
// orthogonality error the merged rotations had (also kept in the layer's
// state with the merge's number). work: eng_poet_model_merge_floats.
size_t eng_poet_model_merge_floats(const eng_poet_model *pm);
double eng_poet_model_merge(eng_poet_model *pm, const eng_layout *lo, int l, float *w, uint16_t *base, uint64_t seed,
                            int64_t merge, float *work);
// Layer l's effective weights written over the W0 in w (a copy of its
// shard): what an export writes.
void eng_poet_model_effective(const eng_poet_model *pm, const eng_layout *lo, int l, float *w, float *work);

#endif
