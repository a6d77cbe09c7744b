// The cpu products' route a test runs on (kernels/cpu/gemm.h). ctest runs
// the tests whose bits depend on it once per route (tests/CMakeLists.txt:
// TRAIND_CPU_GEMM, and OPENBLAS_CORETYPE for the blas route's core types);
// a route or core type this cpu cannot run is reported skipped (exit 77)
// with the reason, never run on another route in its place.
#ifndef TESTS_ROUTE_H
#define TESTS_ROUTE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kernels/cpu/gemm.h"

// Prints the route (and OpenBLAS's core on the blas route); exits 77 when
// the environment asks for one this cpu cannot run.
static inline void test_route_announce(void) {
  char msg[256];
  const char *want = getenv("OPENBLAS_CORETYPE");
  if (want && *want && !eng_k_blas_core_runs(want)) { // before any product runs its kernels
    printf("skipped: OPENBLAS_CORETYPE=%s: this cpu lacks the instructions of its kernels\n", want);
    exit(77);
  }
  int r = eng_k_gemm_route_init(msg, sizeof msg);
  if (r < 0) {
    printf("skipped: %s\n", msg);
    exit(77);
  }
  if (r == ENG_K_GEMM_BLAS && want && *want && strcasecmp(want, eng_k_blas_core()) != 0) {
    printf("skipped: OPENBLAS_CORETYPE=%s: OpenBLAS runs %s on this cpu instead\n", want, eng_k_blas_core());
    exit(77);
  }
  if (r == ENG_K_GEMM_BLAS)
    printf("cpu products on the blas route, OpenBLAS core %s (%s)\n", eng_k_blas_core(),
           eng_k_blas_chains() ? "its kernels give the chains" : "its kernels sum otherwise: own chains only");
  else
    printf("cpu products on the %s route\n", eng_k_gemm_route_name(r));
}

#endif
