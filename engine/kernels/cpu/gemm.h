// sgemm for the cpu kernels, with results defined to the bit.
//
// Four routes; a process runs one (eng_k_gemm_route), chosen from the cpu's
// features (CPUID) or forced by TRAIND_CPU_GEMM=amx|avx512|avx2|blas:
// - amx (kernels/cpu/gemm_amx.h): the product of three-way bf16 splits on
//   the tile unit: fp32's accuracy, its bits defined per element there.
// - avx512, avx2 (kernels/cpu/gemm_fma.h): the engine's own kernels on the
//   vector units, computing the fp32 chains below; the two give the same bits.
// - blas: the same chains, large blocks from OpenBLAS where its kernels
//   compute them (kernels/cpu/gemm_blas.c), for cpus without AVX2 and FMA.
// The chains: for each block of ENG_K_GEMM_KB consecutive k, each element's
// dot product as one fmaf chain in increasing k from 0, the blocks added into
// C in k order (C = block 1 when beta is 0). On every route a row's result
// depends on nothing but its own inputs: not on how many rows the call has,
// where the row sits, or the thread count.
#ifndef ENG_KERNELS_CPU_GEMM_H
#define ENG_KERNELS_CPU_GEMM_H

#include <stddef.h>

#include "kernels/kernels.h" // eng_k_rows_fn

#define ENG_K_GEMM_KB 384

// Row-major C[M,N] = A·B + beta·C with beta 0 or 1, A = [M,K] (or [K,M] when
// ta), B = [K,N] (or [N,K] when tb), leading dimensions as in cblas.
void eng_k_sgemm(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb, float beta,
                 float *C, int ldc);

// eng_k_sgemm, then then(ctx, r0, r1) for every row range of C once its rows
// hold their final values: on the avx512, avx2 and amx routes right after
// their last block where the product allows (one column chunk), while they
// are in cache; otherwise after the product, in ranges spread over the
// threads. Ranges are disjoint and may run at once on different threads,
// so the work on a row must depend on that row alone (then it gives the same
// bits on every route and thread count).
void eng_k_sgemm_then(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                      float beta, float *C, int ldc, eng_k_rows_fn then, void *ctx);

// Block-diagonal products (POET-X's rotations; kernels/cpu/gemm_bdiag.c):
// over T rows and dim columns in blocks of b (b divides dim), B_k = B + k·b·b
// (b × b, row-major):
//   eng_k_sgemm_bdiag:      C[t, kb + j] = Σ_i A[t, kb + i] · op(B_k)[i, j],
//                           op(B_k) = B_k or its transpose (tb);
//   eng_k_sgemm_bdiag_grad: C_k[i, j] += Σ_t A[t, kb + i] · D[t, kb + j],
//                           C_k = C + k·b·b.
// The sums are eng_k_sgemm's chains (blocks of ENG_K_GEMM_KB, each an fmaf
// chain in increasing order, added in order) on every route, amx's
// included: the bits of eng_k_sgemm per block on the avx512, avx2 and blas
// routes. C must not overlap A or D. work: eng_k_bdiag_work(dim, b) floats
// (the op(B) panels).
size_t eng_k_bdiag_work(int dim, int b);
void eng_k_sgemm_bdiag(int T, int dim, int b, const float *A, int lda, const float *B, int tb, float *C, int ldc,
                       float *work);
void eng_k_sgemm_bdiag_grad(int T, int dim, int b, const float *A, int lda, const float *D, int ldd, float *C);

// C rows 0..ni, columns 0..nj = (add = 0) or += (add = 1) a block computed
// apart, rows lds floats apart: how the routes' edge blocks reach C.
static inline void eng_k_gemm_block_put(float *C, size_t ldc, const float *src, size_t lds, int ni, int nj, int add) {
  for (int i = 0; i < ni; i++) {
    float *c = C + (size_t)i * ldc;
    const float *s = src + (size_t)i * lds;
    if (add)
      for (int j = 0; j < nj; j++) c[j] += s[j];
    else
      for (int j = 0; j < nj; j++) c[j] = s[j];
  }
}

// Bytes of packed panels that may stay in L2 while the other operand's
// blocks pass over them, on the amx and own routes: 3/4 of it (the 2 MiB of these
// machines; 1 MiB where the size is unknown).
size_t eng_k_gemm_l2_budget(void);

typedef enum eng_k_gemm_route {
  ENG_K_GEMM_AMX,
  ENG_K_GEMM_AVX512,
  ENG_K_GEMM_AVX2,
  ENG_K_GEMM_BLAS,
  ENG_K_GEMM_NROUTES,
} eng_k_gemm_route;

// "amx", "avx512", "avx2", "blas".
const char *eng_k_gemm_route_name(eng_k_gemm_route r);
// Whether this cpu and this build can run route r.
int eng_k_gemm_route_usable(eng_k_gemm_route r);
// The process's route, chosen on the first call (thread-safe): the one
// TRAIND_CPU_GEMM names, else the first usable of amx, avx512, avx2, blas.
// Returns -1 with a sentence in msg when TRAIND_CPU_GEMM names no route or
// one this cpu cannot run; later calls give the same answer.
int eng_k_gemm_route_init(char *msg, size_t msglen);
// The route products take (eng_k_gemm_route_init's; a program that skipped
// it and set a bad TRAIND_CPU_GEMM stops here with the sentence on stderr).
eng_k_gemm_route eng_k_gemm_route_get(void);
// Tests: the route from now on, 0; -1 when it is not usable. A run must not
// change it between steps: amx differs from the others in the last bits.
int eng_k_gemm_route_set(eng_k_gemm_route r);

// The blas route's large blocks (kernels/cpu/gemm_blas.c).
void eng_k_blas_sgemm(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                      float beta, float *C, int ldc, eng_k_rows_fn then, void *ctx);
// The OpenBLAS core type in use ("SkylakeX", ...). When the blas route is
// chosen and OpenBLAS has taken a generic core for an AVX2 or AVX-512 cpu it
// does not know (and OPENBLAS_CORETYPE is not set), the route moves it to
// Haswell's or SkylakeX's kernels first.
// Then (once per process) checks whether its kernels compute the chains:
// eng_k_blas_chains says (1 yes; 0 no, and the route runs own code only).
const char *eng_k_blas_core(void);
// Whether this cpu has the instructions core's kernels use (0: AVX-512 or
// AVX2 it lacks; OpenBLAS runs a forced OPENBLAS_CORETYPE regardless, and
// its first product then dies of SIGILL). Unknown names: 1.
int eng_k_blas_core_runs(const char *core);
void eng_k_blas_core_fit(void);
int eng_k_blas_chains(void);

// After a product, then(ctx, r0, r1) on row ranges spread over the threads.
void eng_k_gemm_then_after(int M, int N, eng_k_rows_fn then, void *ctx);

#endif
