// cuBLASLt GEMMs with bf16 operands and fp32 accumulation, and strided
// batches of fp32 ones (the POET-X rotations' blocks), planned once per
// shape: the descriptors and the heuristic's algorithm are cached in the
// context, so a layer's dozen GEMMs cost one query each for the whole run.
// The same plan runs the same algorithm, so results repeat to the bit.
#include "kernels/cuda/ctx.cuh"

static int lt_fail(eng_err *e, cublasStatus_t st, const char *call, int line) {
  return eng_err_set(e, ENG_EDEVICE, "%s:%d: %s failed: %s", __FILE__, line, call, cublasLtGetStatusString(st));
}

#define LT_TRY(call)                                                 \
  do {                                                               \
    cublasStatus_t st_ = (call);                                     \
    if (st_ != CUBLAS_STATUS_SUCCESS) return lt_fail(e, st_, #call, __LINE__); \
  } while (0)

// Largest power of two (up to 256) dividing the address.
static int align_of(const void *p) {
  uintptr_t u = (uintptr_t)p;
  int a = 1;
  while (a < 256 && (u & (uintptr_t)a) == 0) a <<= 1;
  return a;
}

// The alignment of every operand of a strided batch: the first one's,
// capped by the stride's (the k-th operand starts k·stride elements on).
static int batch_align(const void *p, long long stride, size_t esize, int batch) {
  int a = align_of(p);
  if (batch > 1) {
    int s = align_of((const void *)(uintptr_t)((unsigned long long)stride * esize));
    if (s < a) a = s;
  }
  return a;
}

static cublasStatus_t set_batch(cublasLtMatrixLayout_t l, int batch, long long stride) {
  int32_t count = batch;
  int64_t off = stride;
  cublasStatus_t st = cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  return cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &off, sizeof off);
}

static void plan_destroy(eng_cuda_gemm_plan *p) {
  if (p->desc) cublasLtMatmulDescDestroy(p->desc);
  if (p->a) cublasLtMatrixLayoutDestroy(p->a);
  if (p->b) cublasLtMatrixLayoutDestroy(p->b);
  if (p->c) cublasLtMatrixLayoutDestroy(p->c);
  memset(p, 0, sizeof *p);
}

void eng_cuda_gemm_cache_clear(eng_cuda_ctx *cx) {
  for (int i = 0; i < cx->n_plans; i++) plan_destroy(&cx->plans[i]);
  cx->n_plans = 0;
  cx->next_evict = 0;
}

static int plan_make(eng_cuda_ctx *cx, eng_cuda_gemm_plan *p, const eng_cuda_gemm_key *k, eng_err *e) {
  memset(p, 0, sizeof *p);
  p->key = *k;
  cublasOperation_t ta = k->ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = k->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  LT_TRY(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  // Stored shapes: op(A) is m×k, op(B) is k×n, column-major.
  cudaDataType_t ab = k->ab_f32 ? CUDA_R_32F : CUDA_R_16BF;
  LT_TRY(cublasLtMatrixLayoutCreate(&p->a, ab, k->ta ? k->k : k->m, k->ta ? k->m : k->k, k->lda));
  LT_TRY(cublasLtMatrixLayoutCreate(&p->b, ab, k->tb ? k->n : k->k, k->tb ? k->k : k->n, k->ldb));
  LT_TRY(cublasLtMatrixLayoutCreate(&p->c, k->c_f32 ? CUDA_R_32F : CUDA_R_16BF, k->m, k->n, k->ldc));
  if (k->batch > 1) {
    LT_TRY(set_batch(p->a, k->batch, k->sa));
    LT_TRY(set_batch(p->b, k->batch, k->sb));
    LT_TRY(set_batch(p->c, k->batch, k->sc));
  }
  cublasLtMatmulPreference_t pref;
  LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
  size_t ws = ENG_CUDA_GEMM_WS_BYTES;
  uint32_t al[4] = {(uint32_t)k->align[0], (uint32_t)k->align[1], (uint32_t)k->align[2], (uint32_t)k->align[3]};
  cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                           sizeof ws);
  const cublasLtMatmulPreferenceAttributes_t al_attr[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4 && st == CUBLAS_STATUS_SUCCESS; i++)
    st = cublasLtMatmulPreferenceSetAttribute(pref, al_attr[i], &al[i], sizeof al[i]);
  cublasLtMatmulHeuristicResult_t res;
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulAlgoGetHeuristic(cx->lt, p->desc, p->a, p->b, p->c, p->c, pref, 1, &res, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS) return lt_fail(e, st, "cublasLtMatmulAlgoGetHeuristic", __LINE__);
  if (found < 1)
    return eng_err_set(e, ENG_EDEVICE,
                       "%s:%d: cuBLASLt has no %s algorithm for a %c%c GEMM of m=%d n=%d k=%d (lda %d, ldb %d, "
                       "ldc %d, %s output, batch %d)",
                       __FILE__, __LINE__, k->ab_f32 ? "fp32" : "bf16", k->ta ? 'T' : 'N', k->tb ? 'T' : 'N', k->m,
                       k->n, k->k, k->lda, k->ldb, k->ldc, k->c_f32 ? "fp32" : "bf16", k->batch > 1 ? k->batch : 1);
  p->algo = res.algo;
  return 0;
}

static int plan_get(eng_cuda_ctx *cx, const eng_cuda_gemm_key *k, eng_cuda_gemm_plan **out, eng_err *e) {
  for (int i = 0; i < cx->n_plans; i++)
    if (memcmp(&cx->plans[i].key, k, sizeof *k) == 0) {
      *out = &cx->plans[i];
      return 0;
    }
  int slot = cx->n_plans < ENG_CUDA_GEMM_CACHE ? cx->n_plans++ : cx->next_evict++ % ENG_CUDA_GEMM_CACHE;
  eng_cuda_gemm_plan *p = &cx->plans[slot];
  plan_destroy(p);
  int rc = plan_make(cx, p, k, e);
  if (rc) {
    plan_destroy(p); // leaves an all-zero key: no lookup matches it
    return rc;
  }
  *out = p;
  return 0;
}

// D = op(A)·op(B) + beta·C with the plan of key.
static int plan_run(eng_cuda_ctx *cx, const eng_cuda_gemm_key *key, const void *A, const void *B, float beta,
                    const void *C, void *D, eng_err *e) {
  eng_cuda_gemm_plan *p;
  int rc = plan_get(cx, key, &p, e);
  if (rc) return rc;
  const float alpha = 1.0f;
  LT_TRY(cublasLtMatmul(cx->lt, p->desc, &alpha, A, p->a, B, p->b, &beta, C, p->c, D, p->c, &p->algo, cx->ws,
                        ENG_CUDA_GEMM_WS_BYTES, cx->stream));
  return 0;
}

int eng_cuda_gemm(eng_cuda_ctx *cx, int ta, int tb, int m, int n, int k, const void *A, int lda, const void *B,
                  int ldb, float beta, const void *C, void *D, int ldc, int c_f32, eng_err *e) {
  if (m <= 0 || n <= 0) return 0;
  if (!C) C = D;
  if (k <= 0) { // an empty product: D = beta·C
    if (beta == 0.0f) return eng_cuda_zero(D, (size_t)m * n * (c_f32 ? 4 : 2), cx->stream, e);
    if (C != D) ENG_CUDA_TRY(cudaMemcpyAsync(D, C, (size_t)m * n * (c_f32 ? 4 : 2), cudaMemcpyDeviceToDevice,
                                              cx->stream), e);
    return 0;
  }
  eng_cuda_gemm_key key;
  memset(&key, 0, sizeof key); // the key is compared bytewise
  key.ta = ta, key.tb = tb, key.m = m, key.n = n, key.k = k, key.lda = lda, key.ldb = ldb, key.ldc = ldc;
  key.c_f32 = c_f32, key.beta1 = beta != 0.0f;
  key.align[0] = align_of(A), key.align[1] = align_of(B), key.align[2] = align_of(C), key.align[3] = align_of(D);
  return plan_run(cx, &key, A, B, beta, C, D, e);
}

int eng_cuda_sgemm_batched(eng_cuda_ctx *cx, int ta, int tb, int m, int n, int k, const float *A, int lda,
                           long long sa, const float *B, int ldb, long long sb, float beta, float *C, int ldc,
                           long long sc, int batch, eng_err *e) {
  if (m <= 0 || n <= 0 || batch <= 0 || (k <= 0 && beta != 0.0f)) return 0; // nothing to add
  ENG_CUDA_REQUIRE(k > 0, e, "eng_cuda_sgemm_batched: an empty product (k = %d) that would zero C", k);
  eng_cuda_gemm_key key;
  memset(&key, 0, sizeof key);
  key.ta = ta, key.tb = tb, key.m = m, key.n = n, key.k = k, key.lda = lda, key.ldb = ldb, key.ldc = ldc;
  key.c_f32 = 1, key.ab_f32 = 1, key.beta1 = beta != 0.0f, key.batch = batch;
  if (batch > 1) key.sa = sa, key.sb = sb, key.sc = sc; // one product: one plan whatever the strides
  key.align[0] = batch_align(A, sa, 4, batch), key.align[1] = batch_align(B, sb, 4, batch);
  key.align[2] = key.align[3] = batch_align(C, sc, 4, batch);
  return plan_run(cx, &key, A, B, beta, C, C, e);
}
