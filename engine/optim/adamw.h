// fp32 AdamW with decoupled weight decay and bias correction, the same
// arithmetic, in the same order, as torch.optim.AdamW's single-tensor path,
// and the learning-rate schedule (linear warmup, cosine decay).
#ifndef ENG_OPTIM_ADAMW_H
#define ENG_OPTIM_ADAMW_H

#include <stddef.h>
#include <stdint.h>

// The scalars of one update, computed as torch computes them: Python floats
// (double), then used with fp32 tensors; step_size and the square root of the
// second bias correction are doubles rounded once to float. Shared with the
// 8-bit optimizer (optim/adamw8.h), which does the same arithmetic per element:
//   gi = g * clip; p = w * decay; m' = m + (gi - m) * a1;
//   v' = v * beta2 + a2 * (gi * gi); denom = sqrtf(v') / bc2_sqrt + eps;
//   w' = p - step_size * (m' / denom)
typedef struct eng_adamw_coef {
  float step_size; // lr / (1 - beta1^t)
  float bc2_sqrt;  // sqrt(1 - beta2^t)
  float decay;     // 1 - lr * wd
  float a1, a2;    // 1 - beta1, 1 - beta2
  float beta2, eps, clip;
} eng_adamw_coef;

eng_adamw_coef eng_adamw_coef_make(float lr, float wd, float beta1, float beta2, float eps,
                                   float clip_scale, int64_t t);

// One update of n parameters: g is scaled by clip_scale first; t is the
// 1-based step count used for bias correction.
void eng_adamw_update(float *w, const float *g, float *m, float *v, size_t n, float lr, float wd,
                      float beta1, float beta2, float eps, float clip_scale, int64_t t);

// Learning rate of 0-based step s: warmup linearly to lr over `warmup`
// steps ((s+1)/warmup), then cosine from lr to min_lr at step `total`
// (min_lr after it). total <= warmup means constant lr after warmup.
float eng_lr_at(int64_t s, float lr, float min_lr, int warmup, int total);

#endif
