// POET-X's merge-then-reinitialise and the clipping ramp after it (poet.h).
#include <string.h>

#include "poet/poet.h"

#include "common/bf16.h"
#include "kernels/cpu/gemm.h"

// W0' [r, c] = M[sr[r], sc[c]] over the m×n M in W, in place: rows move
// along the cycles of sr, one row held aside per cycle; each row's columns
// are gathered by sc on the way (held: 2·n floats; done: m bytes).
static void permute_rows_cols(int m, int n, float *W, const int32_t *sr, const int32_t *sc, float *held,
                              unsigned char *done) {
  memset(done, 0, (size_t)m);
  float *copy = held + n;
  for (int r0 = 0; r0 < m; r0++) {
    if (done[r0]) continue;
    memcpy(held, W + (size_t)r0 * n, (size_t)n * sizeof *held);
    for (int dst = r0;;) {
      int src = sr[dst];
      const float *from = src == r0 ? held : W + (size_t)src * n;
      float *to = W + (size_t)dst * n;
      memcpy(copy, from, (size_t)n * sizeof *copy); // from may be `to` itself only through held
      for (int c = 0; c < n; c++) to[c] = copy[sc[c]];
      done[dst] = 1;
      if (src == r0) break;
      dst = src;
    }
  }
}

void eng_poet_effective_here(int m, int n, int b, float *W, const int32_t *pin, const int32_t *pout, const float *rin,
                             const float *rout, float *work) {
  float *S = work, *held = S + (size_t)b * n;
  int32_t *sr = (int32_t *)(held + 2 * (size_t)n), *sc = sr + m;
  unsigned char *done = (unsigned char *)(sc + n);
  // M = diag(R_out)ᵀ · W0 · diag(R_in)ᵀ a block row at a time, with
  // eng_poet_effective's products (whose rows do not depend on the split).
  for (int k = 0; k < m / b; k++) {
    float *rows = W + (size_t)k * b * n;
    eng_k_sgemm(1, 0, b, n, b, rout + (size_t)k * b * b, b, rows, n, 0.0f, S, n);
    eng_poet_rotate(b, n, b, S, n, rin, 1, rows, n);
  }
  // W[i, pin[c]] = M[pout[i], c], i.e. W[i, c] = M[pout[i], pin⁻¹[c]].
  for (int i = 0; i < m; i++) sr[i] = pout[i];
  for (int c = 0; c < n; c++) sc[pin[c]] = c;
  permute_rows_cols(m, n, W, sr, sc, held, done);
}

double eng_poet_merge(int m, int n, int b, float *W0, uint16_t *base, float *theta_in, float *theta_out, int32_t *pin,
                      int32_t *pout, eng_rng *rng, float *work) {
  float *rin = work, *rout = rin + (size_t)n * b, *cw = rout + (size_t)m * b, *rest = cw + 2 * (size_t)b * b;
  eng_poet_cayley(n / b, b, theta_in, rin, cw);
  eng_poet_cayley(m / b, b, theta_out, rout, cw);
  double ein = eng_poet_orth_err(n / b, b, rin), eout = eng_poet_orth_err(m / b, b, rout);
  eng_poet_effective_here(m, n, b, W0, pin, pout, rin, rout, rest);
  // The new base under new permutations: W0'[pout'[i], c] = W[i, pin'[c]].
  eng_poet_perm(rng, n, pin);
  eng_poet_perm(rng, m, pout);
  float *held = rest + (size_t)b * n;
  int32_t *sr = (int32_t *)(held + 2 * (size_t)n), *sc = sr + m;
  if (base) {
    for (int i = 0; i < m; i++) {
      const float *src = W0 + (size_t)i * n;
      for (int c = 0; c < n; c++) held[c] = src[pin[c]];
      eng_bf16_from_f32_n(base + (size_t)pout[i] * n, held, (size_t)n, ENG_ISA_AUTO);
    }
  } else {
    for (int i = 0; i < m; i++) sr[pout[i]] = i;
    for (int c = 0; c < n; c++) sc[c] = pin[c];
    permute_rows_cols(m, n, W0, sr, sc, held, (unsigned char *)(sc + n));
  }
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
