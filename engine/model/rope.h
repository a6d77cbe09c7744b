// RoPE's variants: the names config.json gives them and the frequencies
// each gives a head, as transformers' ROPE_INIT_FUNCTIONS compute them
// (modeling_rope_utils.py), float for float. The kernels rotate by the
// table (kernels.h's eng_k_rope_*); tests/unit/test_rope.c holds the table
// to transformers' own for every type (tests/fixtures/rope).
#ifndef ENG_MODEL_ROPE_H
#define ENG_MODEL_ROPE_H

#include "model/config.h"

// "default", "linear", "llama3" for eng_rope_type t ("?" outside); the type
// named s, or -1.
const char *eng_rope_name(int t);
int eng_rope_find(const char *s);

// The inverse frequencies of the rd rotated dims of a head of c (rd/2 of
// them, rd even), in fp32 as transformers computes them.
void eng_rope_inv_freq(const eng_config *c, int rd, float *inv_freq);

#endif
