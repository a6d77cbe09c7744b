// POET-X's merge-then-reinitialise and the clipping ramp after it (poet.h).
#include <string.h>

#include "poet/poet.h"

double eng_poet_merge(int m, int n, int b, float *W0, float *theta_in, float *theta_out, int32_t *pin, int32_t *pout,
                      eng_rng *rng, float *work) {
  float *rin = work, *rout = rin + (size_t)n * b, *W = rout + (size_t)m * b, *scratch = W + (size_t)m * n,
        *cw = scratch + (size_t)m * n;
  eng_poet_cayley(n / b, b, theta_in, rin, cw);
  eng_poet_cayley(m / b, b, theta_out, rout, cw);
  double ein = eng_poet_orth_err(n / b, b, rin), eout = eng_poet_orth_err(m / b, b, rout);
  eng_poet_weight w = {m, n, b, W0, NULL, pin, pout, rin, rout};
  eng_poet_effective(&w, W, scratch);
  eng_poet_perm(rng, n, pin);
  eng_poet_perm(rng, m, pout);
  eng_poet_rebase(m, n, W, pin, pout, W0);
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
