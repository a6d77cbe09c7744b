#include "optim/adamw.h"

#include <math.h>

eng_adamw_coef eng_adamw_coef_make(float lr, float wd, float beta1, float beta2, float eps,
                                   float clip_scale, int64_t t) {
  const double bc1 = 1.0 - pow((double)beta1, (double)t);
  const double bc2 = 1.0 - pow((double)beta2, (double)t);
  return (eng_adamw_coef){
      .step_size = (float)(lr / bc1),
      .bc2_sqrt = (float)sqrt(bc2),
      .decay = (float)(1.0 - (double)lr * wd),
      .a1 = 1.0f - beta1,
      .a2 = 1.0f - beta2,
      .beta2 = beta2,
      .eps = eps,
      .clip = clip_scale,
  };
}

void eng_adamw_update(float *w, const float *g, float *m, float *v, size_t n, float lr, float wd,
                      float beta1, float beta2, float eps, float clip_scale, int64_t t) {
  const eng_adamw_coef c = eng_adamw_coef_make(lr, wd, beta1, beta2, eps, clip_scale, t);
#pragma omp parallel for schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; i++) {
    float gi = g[i] * c.clip;
    float p = w[i] * c.decay;
    float mi = m[i] + (gi - m[i]) * c.a1;
    float vi = v[i] * c.beta2 + c.a2 * (gi * gi);
    float denom = sqrtf(vi) / c.bc2_sqrt + c.eps;
    w[i] = p - c.step_size * (mi / denom);
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
