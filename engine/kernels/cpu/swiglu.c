// SwiGLU gate of the Llama/Qwen MLP: h = silu(gate) · up, silu(g) = g/(1+e^−g)
// (torch's formula). The backward follows torch's silu_backward:
// dgate = (dh·up) · s · (1 + g·(1 − s)), s = 1/(1+e^−g).
#include "kernels/kernels.h"

#include <omp.h>

#include "kernels/cpu/kmath.h"

void eng_k_swiglu_fwd(float *h, const float *gate, const float *up, size_t n) {
#pragma omp parallel for schedule(static) if (n >= ENG_K_PAR_MIN)
  for (size_t i = 0; i < n; i++) h[i] = eng_km_swiglu(gate[i], up[i]);
}

void eng_k_swiglu_bwd(float *dgate, float *dup, const float *dh, const float *gate, const float *up, size_t n) {
#pragma omp parallel for schedule(static) if (n >= ENG_K_PAR_MIN)
  for (size_t i = 0; i < n; i++) eng_km_swiglu_bwd(dh[i], gate[i], up[i], &dgate[i], &dup[i]);
}
