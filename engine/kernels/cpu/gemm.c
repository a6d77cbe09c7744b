// eng_k_sgemm: the route a process runs (kernels/cpu/gemm.h) and the
// dispatch to it.
#include "kernels/cpu/gemm.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/isa.h"
#include "kernels/cpu/gemm_amx.h"
#include "kernels/cpu/gemm_fma.h"
#include "kernels/cpu/kmath.h"

// The packed panels of a k block must stay in L2 while every row block
// passes them. Wider ones (the demo model's 2048-wide gate|up against 384 k:
// 3 MiB of panels) ran 12% slower in a step than OpenBLAS.
size_t eng_k_gemm_l2_budget(void) {
  long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE); // glibc reads it once, at start-up
  return (l2 > 0 ? (size_t)l2 : (size_t)1 << 20) / 4 * 3;
}

// Rows per range when then runs after the product.
enum { THEN_ROWS = 32 };

void eng_k_gemm_then_after(int M, int N, eng_k_rows_fn then, void *ctx) {
  int nr = (M + THEN_ROWS - 1) / THEN_ROWS;
#pragma omp parallel for schedule(static) if ((size_t)M * (size_t)N >= ENG_K_PAR_MIN)
  for (int i = 0; i < nr; i++) then(ctx, i * THEN_ROWS, (i + 1) * THEN_ROWS < M ? (i + 1) * THEN_ROWS : M);
}

// ---- the route ------------------------------------------------------------

static const char *const route_names[ENG_K_GEMM_NROUTES] = {"amx", "avx512", "avx2", "blas"};

const char *eng_k_gemm_route_name(eng_k_gemm_route r) {
  return r >= 0 && r < ENG_K_GEMM_NROUTES ? route_names[r] : "?";
}

int eng_k_gemm_route_usable(eng_k_gemm_route r) {
  switch (r) {
  case ENG_K_GEMM_AMX: return eng_k_amx_usable();
#if defined(__x86_64__)
  case ENG_K_GEMM_AVX512: return eng_isa_supported(ENG_ISA_AVX512) && __builtin_cpu_supports("fma");
  case ENG_K_GEMM_AVX2: return eng_isa_supported(ENG_ISA_AVX2) && __builtin_cpu_supports("fma");
#endif
  case ENG_K_GEMM_BLAS: return 1;
  default: return 0;
  }
}

// Chosen once; route stays -1 and init_msg says why when TRAIND_CPU_GEMM is bad.
static pthread_once_t route_once = PTHREAD_ONCE_INIT;
static int route = -1;
static char init_msg[256];

static void route_choose(void) {
  const char *want = getenv("TRAIND_CPU_GEMM");
  int r = -1;
  if (want && *want) {
    for (int i = 0; i < ENG_K_GEMM_NROUTES; i++)
      if (strcmp(want, route_names[i]) == 0) r = i;
    if (r < 0) {
      snprintf(init_msg, sizeof init_msg, "TRAIND_CPU_GEMM=%.64s names no route of the cpu products (amx, avx512, avx2, blas)",
               want);
      return;
    }
    if (!eng_k_gemm_route_usable(r)) {
      char have[64] = "";
      for (int i = 0; i < ENG_K_GEMM_NROUTES; i++)
        if (eng_k_gemm_route_usable(i))
          snprintf(have + strlen(have), sizeof have - strlen(have), "%s%s", *have ? ", " : "", route_names[i]);
      snprintf(init_msg, sizeof init_msg, "TRAIND_CPU_GEMM=%s: this cpu cannot run that route (it runs %s)", want,
               have);
      return;
    }
  } else {
    for (r = 0; !eng_k_gemm_route_usable(r); r++) {
    }
  }
  if (r == ENG_K_GEMM_BLAS) eng_k_blas_core_fit();
  __atomic_store_n(&route, r, __ATOMIC_RELEASE);
}

int eng_k_gemm_route_init(char *msg, size_t msglen) {
  pthread_once(&route_once, route_choose);
  int r = __atomic_load_n(&route, __ATOMIC_ACQUIRE);
  if (r < 0 && msg && msglen) snprintf(msg, msglen, "%s", init_msg);
  return r;
}

eng_k_gemm_route eng_k_gemm_route_get(void) {
  int r = __atomic_load_n(&route, __ATOMIC_ACQUIRE);
  if (r >= 0) return r;
  char msg[256];
  r = eng_k_gemm_route_init(msg, sizeof msg);
  if (r < 0) {
    fprintf(stderr, "traind: %s\n", msg);
    abort();
  }
  return r;
}

int eng_k_gemm_route_set(eng_k_gemm_route r) {
  if (!eng_k_gemm_route_usable(r)) return -1;
  pthread_once(&route_once, route_choose); // a later first use must not overwrite it
  if (r == ENG_K_GEMM_BLAS) eng_k_blas_core_fit();
  __atomic_store_n(&route, r, __ATOMIC_RELEASE);
  return 0;
}

// ---- the products ----------------------------------------------------------

void eng_k_sgemm(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb, float beta,
                 float *C, int ldc) {
  eng_k_sgemm_then(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc, NULL, NULL);
}

void eng_k_sgemm_then(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                      float beta, float *C, int ldc, eng_k_rows_fn then, void *ctx) {
  if (M <= 0 || N <= 0) return;
  int rc = -1;
  if (K <= 0) {
    if (beta == 0.0f)
      for (int i = 0; i < M; i++) memset(C + (size_t)i * ldc, 0, sizeof(float) * (size_t)N);
    rc = then != NULL;
  } else {
    switch (eng_k_gemm_route_get()) {
    case ENG_K_GEMM_AMX: rc = eng_k_amx_sgemm(ta, tb, M, N, K, A, lda, B, ldb, beta != 0.0f, C, ldc, then, ctx); break;
#if defined(__x86_64__)
    case ENG_K_GEMM_AVX512:
      rc = eng_k_fma_sgemm(&eng_k_fma_avx512, ta, tb, M, N, K, A, lda, B, ldb, beta != 0.0f, C, ldc, then, ctx);
      break;
    case ENG_K_GEMM_AVX2:
      rc = eng_k_fma_sgemm(&eng_k_fma_avx2, ta, tb, M, N, K, A, lda, B, ldb, beta != 0.0f, C, ldc, then, ctx);
      break;
#endif
    default: break;
    }
  }
  if (rc == 1) eng_k_gemm_then_after(M, N, then, ctx);
  if (rc >= 0) return;
  // The blas route, or a route whose packing buffers could not be had: the
  // blas route needs a few MiB at most; amx differs from it only in the last
  // bits, avx512 and avx2 not at all.
  eng_k_blas_sgemm(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc, then, ctx);
}
