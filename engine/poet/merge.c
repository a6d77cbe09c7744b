// POET-X's merge-then-reinitialise and the clipping ramp after it (poet.h).
#include <string.h>

#include "poet/poet.h"

#include "common/bf16.h"
#include "kernels/cpu/gemm.h"

// W[r, c] ← W[sr[r], sc[c]] over m×n values of es bytes (4: fp32, 2:
// bf16) in place: rows move along the cycles of sr, one row held aside per
// cycle (held: a row), their columns gathered by sc on the way (done: m
// bytes). A row is never read after it is written but through held.
static void permute_rows_cols(int m, int n, size_t es, void *W, const int32_t *sr, const int32_t *sc, void *held,
                              unsigned char *done) {
  if (m <= 0 || n <= 0) return;
  char *w = W;
  const size_t row = (size_t)n * es;
  memset(done, 0, (size_t)m);
  for (int r0 = 0; r0 < m; r0++) {
    if (done[r0]) continue;
    memcpy(held, w + (size_t)r0 * row, row);
    for (int dst = r0;;) {
      int src = sr[dst];
      const char *from = src == r0 ? held : w + (size_t)src * row;
      char *to = w + (size_t)dst * row;
      if (es == 4)
        for (int c = 0; c < n; c++) ((float *)to)[c] = ((const float *)from)[sc[c]];
      else
        for (int c = 0; c < n; c++) ((uint16_t *)to)[c] = ((const uint16_t *)from)[sc[c]];
      done[dst] = 1;
      if (src == r0) break;
      dst = src;
    }
  }
}

// M = diag(R_out)ᵀ · W0 · diag(R_in)ᵀ for block row k (b rows of W0 in rows,
// fp32) into out, through S (b·n floats) and panels (eng_k_bdiag_work(n, b)
// floats): eng_poet_effective's products, whose rows do not depend on the
// split.
static void rotate_block_row(int n, int b, int k, const float *rows, const float *rin, const float *rout, float *S,
                             float *panels, float *out) {
  eng_k_sgemm(1, 0, b, n, b, rout + (size_t)k * b * b, b, rows, n, 0.0f, S, n);
  eng_k_sgemm_bdiag(b, n, b, S, n, rin, 1, out, n, panels);
}

void eng_poet_effective_here(int m, int n, int b, float *W, const int32_t *pin, const int32_t *pout, const float *rin,
                             const float *rout, float *work) {
  float *panels = work, *S = panels + eng_k_bdiag_work(n, b), *held = S + (size_t)b * n;
  int32_t *sr = (int32_t *)(held + n), *sc = sr + m;
  for (int k = 0; k < m / b; k++) rotate_block_row(n, b, k, W + (size_t)k * b * n, rin, rout, S, panels, W + (size_t)k * b * n);
  // W[i, pin[c]] = M[pout[i], c], i.e. W[i, c] = M[pout[i], pin⁻¹[c]].
  for (int i = 0; i < m; i++) sr[i] = pout[i];
  for (int c = 0; c < n; c++) sc[pin[c]] = c;
  permute_rows_cols(m, n, sizeof *W, W, sr, sc, held, (unsigned char *)(sc + n));
}

double eng_poet_merge(int m, int n, int b, float *W0, uint16_t *base, float *theta_in, float *theta_out, int32_t *pin,
                      int32_t *pout, eng_rng *rng, float *work) {
  float *panels = work, *rin = panels + eng_k_bdiag_work(n, b), *rout = rin + (size_t)n * b, *cw = rout + (size_t)m * b, *S = cw + 2 * (size_t)b * b,
        *S1 = S + (size_t)b * n, *held = S1 + (size_t)b * n;
  int32_t *sr = (int32_t *)(held + n), *sc = sr + m, *old_out = sc + n, *inv = old_out + m;
  unsigned char *done = (unsigned char *)(inv + n);
  eng_poet_cayley(n / b, b, theta_in, rin, cw);
  eng_poet_cayley(m / b, b, theta_out, rout, cw);
  double ein = eng_poet_orth_err(n / b, b, rin), eout = eng_poet_orth_err(m / b, b, rout);
  // M in place, a block row at a time (a bf16 base widened and rounded back
  // a block row at a time: rounding commutes with the moves below).
  for (int k = 0; k < m / b; k++) {
    if (!base) {
      rotate_block_row(n, b, k, W0 + (size_t)k * b * n, rin, rout, S, panels, W0 + (size_t)k * b * n);
      continue;
    }
    uint16_t *rows = base + (size_t)k * b * n;
    eng_bf16_to_f32_n(S1, rows, (size_t)b * n, ENG_ISA_AUTO);
    rotate_block_row(n, b, k, S1, rin, rout, S, panels, S1);
    eng_bf16_from_f32_n(rows, S1, (size_t)b * n, ENG_ISA_AUTO);
  }
  // The effective weight is W[i, pin[c]] = M[pout[i], c]; under the new
  // permutations pin', pout' the new base is W0'[pout'[i], c] = W[i, pin'[c]]
  // = M[pout[i], pin⁻¹[pin'[c]]]: one move of M's values.
  for (int c = 0; c < n; c++) inv[pin[c]] = c;
  memcpy(old_out, pout, (size_t)m * sizeof *pout);
  eng_poet_perm(rng, n, pin);
  eng_poet_perm(rng, m, pout);
  for (int c = 0; c < n; c++) sc[c] = inv[pin[c]];
  for (int i = 0; i < m; i++) sr[pout[i]] = old_out[i];
  if (base) permute_rows_cols(m, n, sizeof *base, base, sr, sc, held, done);
  else permute_rows_cols(m, n, sizeof *W0, W0, sr, sc, held, done);
  memset(theta_in, 0, (size_t)(n / b) * eng_poet_tri(b) * sizeof *theta_in);
  memset(theta_out, 0, (size_t)(m / b) * eng_poet_tri(b) * sizeof *theta_out);
  return ein > eout ? ein : eout;
}

float eng_poet_clip_ramp(int64_t step, int merge_every) {
  enum { RAMP = 10 };
  if (merge_every <= 0 || step < merge_every) return 1.0f;
  int64_t pos = step % merge_every;
  if (pos >= RAMP) return 1.0f;
  return 0.1f + 0.9f * (float)pos / (float)RAMP;
}
