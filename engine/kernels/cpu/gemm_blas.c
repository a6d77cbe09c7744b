// The blas route (kernels/cpu/gemm.h): the chains, with large blocks from
// OpenBLAS, for cpus without AVX2 and FMA.
//
// OpenBLAS's regular sgemm kernels compute exactly the chains for k <=
// GEMM_Q on some core types (SkylakeX's, Q = 448), not on others (Haswell's
// and the generic ones sum in other orders). Whether they do is checked once,
// on a probe product, when the route is chosen; where they do not, every
// block takes the engine's own chains in plain C (kernels/cpu/gemm_fma.h),
// so the route keeps the bits of the others. Where they do, two of its
// behaviours still fall outside them: its small-matrix kernels (taken when
// M·N·k <= 1e6) sum in another order, and a k between Q and 2Q is split in
// halves that its single- and multi-threaded drivers round differently.
// Hence the k blocks, and small blocks computed with the own chains.
#include "kernels/cpu/gemm.h"

#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/isa.h"
#include "kernels/cpu/gemm_fma.h"

// Blocks with at most this many multiply-adds take the own chains: twice
// the size below which OpenBLAS may pick its small-matrix kernels.
#define SMALL_MACS (2.0 * 1000000.0)

// Whether OpenBLAS's kernels compute the chains (blas_probe); -1 until asked.
static int blas_chains = -1;

void eng_k_blas_sgemm(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                      float beta, float *C, int ldc, eng_k_rows_fn then, void *ctx) {
  eng_k_blas_core_fit();
  for (int k0 = 0; k0 < K; k0 += ENG_K_GEMM_KB) {
    int kb = K - k0 < ENG_K_GEMM_KB ? K - k0 : ENG_K_GEMM_KB, add = k0 > 0 || beta != 0.0f;
    const float *a = ta ? A + (size_t)k0 * lda : A + k0;
    const float *b = tb ? B + k0 : B + (size_t)k0 * ldb;
    if (__atomic_load_n(&blas_chains, __ATOMIC_ACQUIRE) == 1 && (double)M * N * kb > SMALL_MACS)
      cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, kb, 1.0f, a,
                  lda, b, ldb, add ? 1.0f : 0.0f, C, ldc);
    else if (eng_k_fma_sgemm(&eng_k_fma_generic, ta, tb, M, N, kb, a, lda, b, ldb, add, C, ldc, NULL, NULL) < 0)
      // No panel buffer (a few MiB): the block from OpenBLAS, in its order.
      cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, kb, 1.0f, a,
                  lda, b, ldb, add ? 1.0f : 0.0f, C, ldc);
  }
  if (then) eng_k_gemm_then_after(M, N, then, ctx);
}

// ---- OpenBLAS's core type ---------------------------------------------------
//
// A DYNAMIC_ARCH OpenBLAS (Debian's) picks its kernels by cpu model when it
// loads; a model newer than its table gets the generic ones (Debian 12's
// 0.3.21 gives an Emerald Rapids "Prescott": a tenth of the speed, and
// chains other than ours). Its two exported functions below reselect from
// OPENBLAS_CORETYPE; weak, so an OpenBLAS built for one core still links.
extern void gotoblas_dynamic_init(void) __attribute__((weak));
extern void gotoblas_dynamic_quit(void) __attribute__((weak));

const char *eng_k_blas_core(void) { return openblas_get_corename(); }

// Whether a core type named by OpenBLAS runs the kernels of the features
// detected (lower-case names, as openblas_get_corename gives them).
static int core_knows(const char *core, int avx512) {
  static const char *const k512[] = {"skylakex", "cooperlake", "sapphirerapids"};
  static const char *const k2[] = {"haswell", "zen", "skylakex", "cooperlake", "sapphirerapids"};
  const char *const *k = avx512 ? k512 : k2;
  size_t n = avx512 ? sizeof k512 / sizeof *k512 : sizeof k2 / sizeof *k2;
  for (size_t i = 0; i < n; i++)
    if (strcasecmp(core, k[i]) == 0) return 1;
  return 0;
}

int eng_k_blas_core_runs(const char *core) {
  if (core_knows(core, 1)) return eng_isa_supported(ENG_ISA_AVX512);
  if (core_knows(core, 0)) return eng_isa_supported(ENG_ISA_AVX2);
  return 1;
}

// Whether OpenBLAS's kernels give the chains, on a product of 2.4M
// multiply-adds (above its small-matrix size) with rows and columns past its
// register blocks, in every form.
static int blas_probe(void) {
  enum { M = 67, N = 101, K = 350 };
  float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * N * K), *c = malloc(sizeof(float) * M * N);
  int same = a && b && c;
  uint32_t x = 12345;
  for (int i = 0; same && i < M * K; i++) a[i] = (float)((x = x * 1664525u + 1013904223u) >> 8) * 0x1p-23f - 1.0f;
  for (int i = 0; same && i < N * K; i++) b[i] = (float)((x = x * 1664525u + 1013904223u) >> 8) * 0x1p-23f - 1.0f;
  for (int form = 0; same && form < 4; form++) {
    int ta = form >= 2, tb = form & 1;
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, a,
                ta ? M : K, b, tb ? K : N, 0.0f, c, N);
    for (int i = 0; same && i < M; i++)
      for (int j = 0; same && j < N; j++) {
        float chain = 0.0f;
        for (int k = 0; k < K; k++)
          chain = fmaf(ta ? a[k * M + i] : a[i * K + k], tb ? b[j * K + k] : b[k * N + j], chain);
        same = memcmp(&chain, &c[i * N + j], sizeof chain) == 0;
      }
  }
  free(a), free(b), free(c);
  return same;
}

static void core_fit_once(void) {
  int avx512 = eng_isa_supported(ENG_ISA_AVX512), avx2 = eng_isa_supported(ENG_ISA_AVX2);
  const char *forced = getenv("OPENBLAS_CORETYPE");
  if (!(forced && *forced) && gotoblas_dynamic_init && gotoblas_dynamic_quit && (avx512 || avx2) &&
      !core_knows(openblas_get_corename(), avx512)) {
    setenv("OPENBLAS_CORETYPE", avx512 ? "SkylakeX" : "Haswell", 1);
    gotoblas_dynamic_quit();
    gotoblas_dynamic_init();
  }
  __atomic_store_n(&blas_chains, blas_probe(), __ATOMIC_RELEASE);
}

int eng_k_blas_chains(void) {
  eng_k_blas_core_fit();
  return __atomic_load_n(&blas_chains, __ATOMIC_ACQUIRE);
}

void eng_k_blas_core_fit(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, core_fit_once);
}
