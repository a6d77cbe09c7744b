// Compute-optimal sizing (DESIGN §8): a scaling-law fit
// L(N, D) = E + A/N^α + B/D^β of loss against parameters N and training
// tokens D, with training compute C = 6·N·D, gives the N and D that
// minimise the loss for a budget C (Hoffmann et al. 2022, eq. 4):
//   N_opt = G·(C/6)^(β/(α+β)),  D_opt = (C/6)^(α/(α+β)) / G,
//   G = (α·A / (β·B))^(1/(α+β)).
// N counts every parameter, embeddings included, as the Chinchilla paper
// does; the nearest Qwen3-shaped model to an N is one of the published
// Qwen3 dense shapes or a shape of the same family (below).
#ifndef ENG_COMPUTE_SCALING_H
#define ENG_COMPUTE_SCALING_H

#include <stddef.h>

#include "common/err.h"
#include "model/config.h"

typedef struct eng_scaling_fit {
  double E, A, B, alpha, beta;
} eng_scaling_fit;

// The Chinchilla paper's fit (approach 3) as its source has it: E 1.6934,
// A 406.4, B 410.7, α 0.3392, β 0.2849 (eq. 10 prints them rounded to 1.69,
// 0.34 and 0.28, which moves N_opt by 20% at Gopher's budget; these
// reproduce the paper's Table A3 and its 40B for Gopher's 5.76e23 FLOPs).
extern const eng_scaling_fit eng_scaling_chinchilla;
// Besiroglu et al. 2024's refit of the same form to the paper's data:
// E 1.8172, A 482.01, B 2085.43, α 0.3478, β 0.3658 (about 20 tokens per
// parameter, as the paper's approaches 1 and 2 find).
extern const eng_scaling_fit eng_scaling_besiroglu;
// "chinchilla", "besiroglu", or "E,A,B,alpha,beta"; validated.
int eng_scaling_parse(const char *s, eng_scaling_fit *f, eng_err *e);

// Checks that every coefficient is finite and positive (E non-negative);
// the error names the field ("fit.alpha ...").
int eng_scaling_validate(const eng_scaling_fit *f, eng_err *e);
double eng_scaling_loss(const eng_scaling_fit *f, double N, double D);
// The compute-optimal parameters and tokens for C FLOPs.
void eng_scaling_optimal(const eng_scaling_fit *f, double C, double *N, double *D);

// Whether N parameters trained on D tokens are far from the fit's optimum
// for their compute C = 6ND: more than 4 times too many or too few tokens
// per parameter. Then 1, with a sentence saying so (the optimum, and the
// loss the fit predicts there and here) in msg; else 0.
int eng_scaling_advise(const eng_scaling_fit *f, double N, double D, char *msg, size_t n);

// A Qwen3-shaped model: the published dense shapes (Qwen3-0.6B .. 32B:
// head_dim 128, vocab 151936, rope_theta 1e6, embeddings tied up to 4B), and
// between and below them the family's grid: hidden sizes in steps of 128,
// from 1024 query heads of 128 covering the hidden size in multiples of 8
// with 8 KV heads, below it heads of 64 in pairs sharing a KV head, an MLP
// of 3·hidden, hidden/128 to hidden/32 layers, embeddings tied up to 2560.
typedef struct eng_qwen3_shape {
  char name[48];      // "Qwen3-1.7B", or "qwen3 d2304 L32" for a grid shape
  eng_config config;
  double params;      // every parameter, the tied embedding once
} eng_qwen3_shape;

// The published shapes (n of them) with the given vocabulary.
int eng_qwen3_published(eng_qwen3_shape *out, int max, int vocab);
// Up to max shapes nearest to N parameters (by |ln(params/N)|), nearest
// first, vocabulary `vocab` (151936: Qwen3's tokenizer). Returns how many.
int eng_qwen3_nearest(double N, int vocab, eng_qwen3_shape *out, int max);

#endif
