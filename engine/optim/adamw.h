// fp32 AdamW with decoupled weight decay and bias correction, the same
// arithmetic, in the same order, as torch.optim.AdamW's single-tensor path,
// and the learning-rate schedule (linear warmup, cosine decay).
#ifndef ENG_OPTIM_ADAMW_H
#define ENG_OPTIM_ADAMW_H

#include <stddef.h>
#include <stdint.h>

// One update of n parameters: g is scaled by clip_scale first; t is the
// 1-based step count used for bias correction.
void eng_adamw_update(float *w, const float *g, float *m, float *v, size_t n, float lr, float wd,
                      float beta1, float beta2, float eps, float clip_scale, int64_t t);

// Learning rate of 0-based step s: warmup linearly to lr over `warmup`
// steps ((s+1)/warmup), then cosine from lr to min_lr at step `total`
// (min_lr after it). total <= warmup means constant lr after warmup.
float eng_lr_at(int64_t s, float lr, float min_lr, int warmup, int total);

#endif
