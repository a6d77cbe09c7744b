// Σ x² in double for gradient norms. Fixed blocks of BLOCK elements are summed
// independently (in parallel) and then added in block order, a round of
// ROUND blocks at a time so the partials fit on the stack.
#include "kernels/kernels.h"

#include <omp.h>

#include "kernels/cpu/kmath.h"

double eng_k_sumsq(const float *x, size_t n) {
  enum { BLOCK = 4096, ROUND = 256 };
  size_t nblk = (n + BLOCK - 1) / BLOCK;
  double total = 0.0;
  for (size_t r0 = 0; r0 < nblk; r0 += ROUND) {
    double part[ROUND];
    int m = (int)(nblk - r0 < ROUND ? nblk - r0 : ROUND);
#pragma omp parallel for schedule(static) if ((size_t)m * BLOCK >= ENG_K_PAR_MIN)
    for (int b = 0; b < m; b++) {
      size_t i0 = (r0 + (size_t)b) * BLOCK, len = n - i0 < BLOCK ? n - i0 : BLOCK;
      part[b] = eng_k_sumsq_row(x + i0, len);
    }
    for (int b = 0; b < m; b++) total += part[b];
  }
  return total;
}
