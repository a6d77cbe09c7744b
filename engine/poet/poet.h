// POET-X (issue 16): a linear weight trained as an orthogonal equivalence
// transform of a frozen base, W = P_out·R_out·W0·R_in·P_in in the paper's
// words. This module owns the math of one weight on the cpu: the trainable
// parameters' layout, the Cayley–Neumann map to the rotations and its
// backward, the block rotations and permutations, the weight's forward and
// backward (input-centric: the m×n transformed matrix is never built), the
// effective weight an export writes, and the merge's rebasing.
//
// For W0 [m, n] (out, in), a block size b dividing m and n, and x [T, n]:
//   u = x gathered by pin     u[:, j] = x[:, pin[j]]
//   v = u · diag(R_in)        v[:, kb..kb+b) = u[:, kb..kb+b) · R_in[k]
//   z = v · W0ᵀ
//   w = z · diag(R_out)
//   y = w gathered by pout    y[:, i] = w[:, pout[i]]   (+ bias)
// W0 is frozen (no dW0), and so is the bias. It is added last, in the
// layer's own coordinates, so that it stays what it is: the authors add it
// to z, where R_out turns a frozen bias along with the weight and a merge's
// new permutations move it. With every R = I the weight is the permuted W0,
// so eng_poet_rebase places a merged weight under new permutations without
// changing what the layer computes.
//
// Each rotation block comes from a skew-symmetric Q, stored as its strict
// upper triangle in row-major order (Q[i][j] = θ, Q[j][i] = −θ for i < j;
// b(b−1)/2 values, zero at the start and after each merge), through the
// Cayley–Neumann series with three terms as the authors' fused kernel forms
// it: R = (I + Q)(I + Q + Q² + Q³) = I + 2Q + 2Q² + 2Q³ + Q⁴ (their pure-PyTorch
// fallback has 2Q⁴ instead). R is orthogonal up to O(‖Q‖⁴):
// eng_poet_orth_err measures how far.
//
// Products with W0 go through eng_k_sgemm (kernels/cpu/gemm.h): a run's
// route decides their last bits, as for every other product of the engine.
// The block rotations go through eng_k_sgemm_bdiag(_grad): the fp32 chains
// on every route.
#ifndef ENG_POET_POET_H
#define ENG_POET_POET_H

#include <stddef.h>
#include <stdint.h>

#include "common/rng.h"
#include "kernels/cpu/gemm.h" // eng_k_bdiag_work

// Trainable values per block of size b.
static inline size_t eng_poet_tri(int b) { return (size_t)b * (size_t)(b - 1) / 2; }

// R[nblk][b][b] from theta[nblk][tri(b)]. work: 2·b·b floats.
void eng_poet_cayley(int nblk, int b, const float *theta, float *R, float *work);
// dtheta[nblk][tri(b)] += dL/dθ, given dR = dL/dR [nblk][b][b] at theta.
// work: 6·b·b floats.
void eng_poet_cayley_bwd(int nblk, int b, const float *theta, const float *dR, float *dtheta, float *work);
// The largest ‖RᵀR − I‖_F over the blocks, in double.
double eng_poet_orth_err(int nblk, int b, const float *R);

// y[t, j] = x[t, perm[j]] (add = 1: +=) over T rows, rows ldx and ldy
// floats apart; y must not overlap x. A scatter by perm is a gather by its
// inverse.
void eng_poet_gather(int T, int dim, const int32_t *perm, const float *x, int ldx, float *y, int ldy, int add);
// A uniformly random permutation of 0..n-1.
void eng_poet_perm(eng_rng *rng, int n, int32_t *perm);

// One weight: its frozen parts and the rotations of its current θ.
typedef struct eng_poet_weight {
  int m, n, b;                // out, in, block size
  const float *W0;            // [m, n]
  const float *bias;          // [m], or NULL
  const int32_t *pin, *pout;  // [n], [m]
  const float *Rin, *Rout;    // [n/b][b][b], [m/b][b][b] (eng_poet_cayley)
} eng_poet_weight;

// Floats of work the forward or the backward takes for T rows: two
// activations of the wider side, the rotations' panels (kernels/cpu/gemm.h)
// and an inverse permutation.
static inline size_t eng_poet_work(const eng_poet_weight *w, int T) {
  size_t wide = (size_t)(w->n > w->m ? w->n : w->m);
  return 2 * (size_t)T * wide + eng_k_bdiag_work((int)wide, w->b) + wide;
}

// y [T, m] (rows ldy apart) for x [T, n] (rows ldx apart). z (NULL, or
// [T, m] contiguous) keeps the product before the output rotation for the
// backward: the fast mode; without it the backward recomputes it from x (the
// memory mode). Both give the same bits.
void eng_poet_forward(const eng_poet_weight *w, int T, const float *x, int ldx, float *y, int ldy, float *z,
                      float *work);
// For dy [T, m] (rows lddy apart): dx [T, n] (rows lddx apart; add = 0: =,
// 1: +=), and dRin, dRout (+=, as the blocks' dL/dR) for the θ's through
// eng_poet_cayley_bwd. x as the forward had it; z its kept product, or NULL.
void eng_poet_backward(const eng_poet_weight *w, int T, const float *x, int ldx, const float *z, const float *dy,
                       int lddy, float *dx, int lddx, int add, float *dRin, float *dRout, float *work);

// The effective weight W [m, n] (y = x·Wᵀ + bias), which an export writes:
// W[i, pin[c]] = (diag(R_out)ᵀ · W0 · diag(R_in)ᵀ)[pout[i], c], the chain's
// products moved onto the weight. work: eng_poet_effective_work floats.
void eng_poet_effective(const eng_poet_weight *w, float *W, float *work);
// W0 [m, n] that computes W with every R = I under the permutations pin,
// pout: the merge's new base (W0[pout[i], c] = W[i, pin[c]]).
void eng_poet_rebase(int m, int n, const float *W, const int32_t *pin, const int32_t *pout, float *W0);

// A decoder layer under POET-X: its seven weights (the frozen W0 are the
// layer shard's own tensors, model/layout.h) with their permutations and the
// rotations of their current θ; the backward adds into the dL/dR of each
// side. exec/layer.c computes the layer with these in place of its plain
// products; biases (Qwen2's q, k, v) stay frozen.
enum { ENG_POET_Q, ENG_POET_K, ENG_POET_V, ENG_POET_O, ENG_POET_GATE, ENG_POET_UP, ENG_POET_DOWN, ENG_POET_WEIGHTS };
typedef struct eng_poet_layer {
  int b;
  const int32_t *pin[ENG_POET_WEIGHTS], *pout[ENG_POET_WEIGHTS];
  const float *rin[ENG_POET_WEIGHTS], *rout[ENG_POET_WEIGHTS];
  float *drin[ENG_POET_WEIGHTS], *drout[ENG_POET_WEIGHTS]; // backward: dL/dR, +=
  float *work;                                             // eng_poet_layer_work floats
} eng_poet_layer;
// Floats of work for a layer's forward or backward over n rows, the largest
// weight's (in = out dims of d_model, d_ff and the attention's widths) at
// block size b.
size_t eng_poet_layer_work(int d, int ff, int qd, int kvd, int b, int n);

// The effective weight written over W0 [m, n] in place (the rotations
// rin, rout from eng_poet_cayley): eng_poet_effective's values, but for a
// block row of products and two rows of work. work: eng_poet_effective_work.
static inline size_t eng_poet_effective_work(int m, int n, int b) {
  return eng_k_bdiag_work(n, b) + (size_t)b * n + (size_t)n + (size_t)(m + n) + (size_t)m / 4 + 1;
}
void eng_poet_effective_here(int m, int n, int b, float *W, const int32_t *pin, const int32_t *pout, const float *rin,
                             const float *rout, float *work);

// Merge-then-reinitialise one weight: W0 becomes its effective weight,
// placed under new permutations drawn from rng, and θ (both sides) returns
// to zero, so the layer computes what it computed before. The caller resets
// the θ's Adam moments and step count. theta_in [n/b][tri(b)], theta_out
// [m/b][tri(b)]. W0 [m, n] in fp32, or (W0 NULL) base [m, n] in bf16, the
// new one rounded to nearest even. In place but for two block rows and a
// row of work. Returns the orthogonality error the merged rotations had (the
// larger side's, eng_poet_orth_err). work: eng_poet_merge_work floats.
static inline size_t eng_poet_merge_work(int m, int n, int b) {
  return eng_k_bdiag_work(n, b) + (size_t)(m + n) * (size_t)b + 2 * (size_t)b * b + 2 * (size_t)b * n + (size_t)n + 2 * (size_t)(m + n) +
         (size_t)m / 4 + 1;
}
double eng_poet_merge(int m, int n, int b, float *W0, uint16_t *base, float *theta_in, float *theta_out, int32_t *pin,
                      int32_t *pout, eng_rng *rng, float *work);

// The gradient-clipping threshold's factor for the update after `step`
// updates with merges every merge_every: 0.1 right after a merge, rising
// linearly to 1 over the next 10 updates, 1 before the first merge (the
// authors' schedule, without their cut-off at a fixed step).
float eng_poet_clip_ramp(int64_t step, int merge_every);

#endif
