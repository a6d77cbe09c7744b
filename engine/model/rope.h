// RoPE's variants: the names config.json gives them and the table each
// gives a head (kernels.h's eng_k_rope: the rotated dims, their inverse
// frequencies, the factor cos and sin are scaled by), as transformers'
// rotary embedding computes them (modeling_rope_utils.py's
// ROPE_INIT_FUNCTIONS, and the plain one), float for float, but that
// theta^(2i/rd) is the C library's powf, which on rare exponents rounds to
// the float beside the one torch's vectorised pow gives (Sleef's, within an
// ulp): e.g. 1 of 64 frequencies at theta 1e6, head_dim 128. Both backends
// rotate by the table; tests/unit/test_rope.c holds it to transformers' own
// for every type (tests/fixtures/rope).
#ifndef ENG_MODEL_ROPE_H
#define ENG_MODEL_ROPE_H

#include "kernels/kernels.h"
#include "model/config.h"

// "default", "linear", "llama3", "yarn" for eng_rope_type t ("?" outside);
// the type named s, or -1.
const char *eng_rope_name(int t);
int eng_rope_find(const char *s);

// The table of a head of c: its rope_dim (head_dim when 0) rotated dims,
// their frequencies and the cos/sin scale.
void eng_rope_table(const eng_config *c, eng_k_rope *r);

#endif
