// Which SIMD code path a kernel with hand-written variants runs. Every path
// computes the same roundings in the same order, so the choice changes speed,
// never results; tests force each path in turn to prove it.
#ifndef ENG_COMMON_ISA_H
#define ENG_COMMON_ISA_H

typedef enum {
  ENG_ISA_AUTO = 0,  // the best path the CPU runs (see eng_isa_resolve)
  ENG_ISA_SCALAR,    // plain C, any CPU
  ENG_ISA_AVX2,      // x86-64 AVX2
  ENG_ISA_AVX512,    // x86-64 AVX-512 F, BW, DQ, VL
} eng_isa;

// 1 when this CPU (and this build: x86-64 only for the SIMD paths) can run isa.
int eng_isa_supported(eng_isa isa);

// The path a request runs. An explicit request that is supported is itself;
// one that is not gives ENG_ISA_AUTO, which callers report as an error (no
// silent fallback: a test that asks for AVX-512 must run AVX-512). AUTO gives
// the path the environment variable TRAIND_ISA names ("scalar", "avx2",
// "avx512") when it is supported, else the best supported path. TRAIND_ISA is
// read once per process.
eng_isa eng_isa_resolve(eng_isa isa);

// "auto", "scalar", "avx2", "avx512".
const char *eng_isa_name(eng_isa isa);

#endif
