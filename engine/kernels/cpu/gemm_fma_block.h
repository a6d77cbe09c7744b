// The register block of kernels/cpu/gemm_fma.h, written once for every
// instruction set: MR rows × two vectors of columns of chains, one broadcast
// of A and two loads of the panel per step of k, then C = or + the chains;
// and the driver's VW × VW transpose of a tile. Its includer
// (gemm_fma_avx512.c, gemm_fma_avx2.c) defines first:
//   FMA_TARGET        the functions' target attribute
//   MR, NR            rows, and columns (two vectors)
//   VEC               the vector type, VW its floats
//   VZERO() VLOAD(p) VLOADU(p) VSTOREU(p, v) VBCAST(p) VFMA(a, b, c) VADD(a, b)
//   VTRANSPOSE(r)     VEC r[VW] transposed in registers (r[c] becomes column c)
// and gets the static functions rows, cols and tile_t for its eng_k_fma_isa.

// Row q, step k of op(A) is A[q·rs + k·ks]; the two callers fix one stride
// to 1 so that each becomes its own loop.
FMA_TARGET static inline __attribute__((always_inline)) void block(int kb, const float *A, size_t rs, size_t ks,
                                                                   const float *restrict bp, float *C, size_t ldc,
                                                                   int add) {
  VEC c0[MR], c1[MR];
  _Pragma("GCC unroll 16") for (int q = 0; q < MR; q++) c0[q] = c1[q] = VZERO();
  for (int k = 0; k < kb; k++) {
    const VEC b0 = VLOAD(bp + (size_t)k * NR), b1 = VLOAD(bp + (size_t)k * NR + VW);
    const float *a = A + (size_t)k * ks;
    _Pragma("GCC unroll 16") for (int q = 0; q < MR; q++) {
      const VEC aq = VBCAST(a + (size_t)q * rs);
      c0[q] = VFMA(aq, b0, c0[q]);
      c1[q] = VFMA(aq, b1, c1[q]);
    }
  }
  _Pragma("GCC unroll 16") for (int q = 0; q < MR; q++) {
    float *c = C + (size_t)q * ldc;
    if (add) {
      c0[q] = VADD(VLOADU(c), c0[q]);
      c1[q] = VADD(VLOADU(c + VW), c1[q]);
    }
    VSTOREU(c, c0[q]);
    VSTOREU(c + VW, c1[q]);
  }
}

FMA_TARGET static void rows(int kb, const float *A, size_t lda, const float *bp, float *C, size_t ldc, int add) {
  block(kb, A, lda, 1, bp, C, ldc, add);
}

FMA_TARGET static void cols(int kb, const float *A, size_t lda, const float *bp, float *C, size_t ldc, int add) {
  block(kb, A, 1, lda, bp, C, ldc, add);
}

// The driver's tile_t: VW rows of src in, their columns out.
FMA_TARGET static void tile_t(float *dst, size_t ldd, const float *src, size_t lds) {
  VEC r[VW];
  for (int i = 0; i < VW; i++) r[i] = VLOADU(src + (size_t)i * lds);
  VTRANSPOSE(r);
  for (int i = 0; i < VW; i++) VSTOREU(dst + (size_t)i * ldd, r[i]);
}
