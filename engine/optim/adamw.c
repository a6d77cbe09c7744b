#include "optim/adamw.h"

#include <math.h>

void eng_adamw_update(float *w, const float *g, float *m, float *v, size_t n, float lr, float wd,
                      float beta1, float beta2, float eps, float clip_scale, int64_t t) {
  // Scalars as torch computes them: Python floats (double), then used with
  // fp32 tensors. step_size and the sqrt of the bias correction are doubles
  // rounded once to float.
  const double bc1 = 1.0 - pow((double)beta1, (double)t);
  const double bc2 = 1.0 - pow((double)beta2, (double)t);
  const float step_size = (float)(lr / bc1);
  const float bc2_sqrt = (float)sqrt(bc2);
  const float decay = (float)(1.0 - (double)lr * wd);
  const float a1 = 1.0f - beta1, a2 = 1.0f - beta2;
#pragma omp parallel for schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; i++) {
    float gi = g[i] * clip_scale;
    float p = w[i] * decay;
    float mi = m[i] + (gi - m[i]) * a1;
    float vi = v[i] * beta2 + a2 * (gi * gi);
    float denom = sqrtf(vi) / bc2_sqrt + eps;
    w[i] = p - step_size * (mi / denom);
    m[i] = mi;
    v[i] = vi;
  }
}

float eng_lr_at(int64_t s, float lr, float min_lr, int warmup, int total) {
  if (s < warmup) return lr * (float)(s + 1) / (float)warmup;
  if (total <= warmup) return lr;
  if (s >= total) return min_lr;
  double progress = (double)(s - warmup) / (double)(total - warmup);
  return (float)(min_lr + 0.5 * (lr - min_lr) * (1.0 + cos(M_PI * progress)));
}
