// POET-X on the GPU (kernels_cuda.h's "POET-X" section): the Cayley–Neumann
// map of the rotation blocks and its backward, the block rotations, the
// permutations and one weight's chain, composed as poet/cayley.c and
// poet/linear.c compose them on the cpu. Every product is an fp32 cuBLASLt
// GEMM (eng_cuda_sgemm_batched); the blocks of a rotation, or of the map,
// are one strided batch, so a weight's rotation costs one launch whatever
// its block count. The kernels here only move values and add them: one
// thread per element, each writing its own destination, so there are no
// atomics and the results repeat to the bit.
#include "kernels/cuda/ctx.cuh"

// ---- products ------------------------------------------------------------------------

// Row-major C[M,N] = op(A)·op(B) + beta·C over `batch` products, operands
// sa, sb, sc floats apart: eng_k_sgemm's convention (A is [M,K], or [K,M]
// when ta), handed to column-major cuBLASLt as Cᵀ = op(B)ᵀ·op(A)ᵀ.
static int rm_sgemm(eng_cuda_ctx *cx, int ta, int tb, int M, int N, int K, const float *A, int lda, long long sa,
                    const float *B, int ldb, long long sb, float beta, float *C, int ldc, long long sc, int batch,
                    eng_err *e) {
  return eng_cuda_sgemm_batched(cx, tb, ta, N, M, K, B, ldb, sb, A, lda, sa, beta, C, ldc, sc, batch, e);
}

// Blocks of b×b, nblk of them back to back: C = op(A)·op(B) per block.
static int blk_sgemm(eng_cuda_ctx *cx, int nblk, int b, int ta, int tb, const float *A, const float *B, float *C,
                     eng_err *e) {
  long long bb = (long long)b * b;
  return rm_sgemm(cx, ta, tb, b, b, b, A, b, bb, B, b, bb, 0.0f, C, b, bb, nblk, e);
}

// ---- the Cayley–Neumann map ----------------------------------------------------------

// Index of θ_ij (i < j) in the strict upper triangle, row-major: the rows
// above i hold (b−1) + (b−2) + … + (b−i) values.
static __device__ __forceinline__ size_t tri_index(int b, int i, int j) {
  return (size_t)i * b - (size_t)i * (i + 1) / 2 + (size_t)(j - i - 1);
}

// Q (skew, from θ) and S = 2I + Q, the first factor of the Horner form,
// for every block.
static __global__ void skew_k(int nblk, int b, const float *theta, float *Q, float *S) {
  size_t bb = (size_t)b * b, n = (size_t)nblk * bb, tri = (size_t)b * (b - 1) / 2;
  for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += (size_t)gridDim.x * blockDim.x) {
    size_t k = idx / bb;
    int i = (int)(idx % bb / b), j = (int)(idx % b);
    const float *th = theta + k * tri;
    float q = i < j ? th[tri_index(b, i, j)] : i > j ? -th[tri_index(b, j, i)] : 0.0f;
    Q[idx] = q;
    S[idx] = i == j ? q + 2.0f : q;
  }
}

// A = c·I + A on every block.
static __global__ void add_eye_k(int nblk, int b, float c, float *A) {
  size_t n = (size_t)nblk * b;
  for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += (size_t)gridDim.x * blockDim.x) {
    size_t k = idx / b, i = idx % b;
    A[k * b * b + i * b + i] += c;
  }
}

static int add_eye(eng_cuda_ctx *cx, int nblk, int b, float c, float *A, eng_err *e) {
  add_eye_k<<<grid_for((size_t)nblk * b, 256), 256, 0, cx->stream>>>(nblk, b, c, A);
  ENG_CUDA_LAUNCHED("add_eye_k", e);
  return 0;
}

size_t eng_cuda_poet_cayley_work_bytes(int nblk, int b) {
  eng_cuda_carve cv = {NULL, 0};
  for (int i = 0; i < 2; i++) eng_cuda_carve_take(&cv, (size_t)nblk * b * b * sizeof(float));
  return cv.off;
}

// R = I + Q(2I + Q(2I + Q(2I + Q))), cayley.c's Horner form, every block at
// once.
int eng_cuda_poet_cayley(eng_cuda_ctx *cx, int nblk, int b, const float *theta, float *R, void *work, eng_err *e) {
  ENG_CUDA_REQUIRE(b > 0, e, "eng_cuda_poet_cayley: block size %d", b);
  if (nblk <= 0) return 0;
  size_t n = (size_t)nblk * b * b;
  eng_cuda_carve cv = {(char *)work, 0};
  float *Q = (float *)eng_cuda_carve_take(&cv, n * sizeof(float));
  float *S = (float *)eng_cuda_carve_take(&cv, n * sizeof(float));
  skew_k<<<grid_for(n, 256), 256, 0, cx->stream>>>(nblk, b, theta, Q, S);
  ENG_CUDA_LAUNCHED("skew_k", e);
  int rc = blk_sgemm(cx, nblk, b, 0, 0, Q, S, R, e); // Q(2I + Q)
  if (!rc) rc = add_eye(cx, nblk, b, 2.0f, R, e);
  if (!rc) rc = blk_sgemm(cx, nblk, b, 0, 0, Q, R, S, e); // Q(2I + Q(2I + Q))
  if (!rc) rc = add_eye(cx, nblk, b, 2.0f, S, e);
  if (!rc) rc = blk_sgemm(cx, nblk, b, 0, 0, Q, S, R, e);
  if (!rc) rc = add_eye(cx, nblk, b, 1.0f, R, e);
  return rc;
}

// The sums of cayley_bwd's nested form, in its order of operations: step 0
// S += 2G + GA, step 1 U += 2G + 2GA + GA², step 2 S += 2(G + GA + GA²) + GA³.
static __global__ void neumann_terms_k(int step, size_t n, const float *G, const float *GA, const float *GA2,
                                       const float *GA3, float *out) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    if (step == 0) out[i] += 2.0f * G[i] + GA[i];
    else if (step == 1) out[i] += 2.0f * G[i] + 2.0f * GA[i] + GA2[i];
    else out[i] += 2.0f * (G[i] + GA[i] + GA2[i]) + GA3[i];
  }
}

static int neumann_terms(eng_cuda_ctx *cx, int step, size_t n, const float *G, const float *GA, const float *GA2,
                         const float *GA3, float *out, eng_err *e) {
  neumann_terms_k<<<grid_for(n, 256), 256, 0, cx->stream>>>(step, n, G, GA, GA2, GA3, out);
  ENG_CUDA_LAUNCHED("neumann_terms_k", e);
  return 0;
}

// dθ_ij += (dL/dQ)_ij − (dL/dQ)_ji: a thread per element of the upper
// triangle, each adding into its own θ.
static __global__ void skew_grad_k(int nblk, int b, const float *S, float *dtheta) {
  size_t bb = (size_t)b * b, n = (size_t)nblk * bb, tri = (size_t)b * (b - 1) / 2;
  for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += (size_t)gridDim.x * blockDim.x) {
    size_t k = idx / bb;
    int i = (int)(idx % bb / b), j = (int)(idx % b);
    if (i >= j) continue;
    const float *s = S + k * bb;
    dtheta[k * tri + tri_index(b, i, j)] += s[(size_t)i * b + j] - s[(size_t)j * b + i];
  }
}

size_t eng_cuda_poet_cayley_bwd_work_bytes(int nblk, int b) {
  eng_cuda_carve cv = {NULL, 0};
  for (int i = 0; i < 6; i++) eng_cuda_carve_take(&cv, (size_t)nblk * b * b * sizeof(float));
  return cv.off;
}

// cayley.c's backward: with A = Qᵀ, dL/dQ = T0 + A(T1 + A(T2 + A·T3)), the
// T_p from G·A^q, every block at once.
int eng_cuda_poet_cayley_bwd(eng_cuda_ctx *cx, int nblk, int b, const float *theta, const float *dR, float *dtheta,
                             void *work, eng_err *e) {
  ENG_CUDA_REQUIRE(b > 0, e, "eng_cuda_poet_cayley_bwd: block size %d", b);
  if (nblk <= 0) return 0;
  size_t n = (size_t)nblk * b * b;
  eng_cuda_carve cv = {(char *)work, 0};
  float *p[6];
  for (int i = 0; i < 6; i++) p[i] = (float *)eng_cuda_carve_take(&cv, n * sizeof(float));
  float *Q = p[0], *GA = p[1], *GA2 = p[2], *GA3 = p[3], *S = p[4], *U = p[5];
  skew_k<<<grid_for(n, 256), 256, 0, cx->stream>>>(nblk, b, theta, Q, S); // S: scratch here, rewritten below
  ENG_CUDA_LAUNCHED("skew_k", e);
  const float *G = dR;
  int rc = blk_sgemm(cx, nblk, b, 0, 1, G, Q, GA, e); // G·Qᵀ
  if (!rc) rc = blk_sgemm(cx, nblk, b, 0, 1, GA, Q, GA2, e);
  if (!rc) rc = blk_sgemm(cx, nblk, b, 0, 1, GA2, Q, GA3, e);
  if (!rc) rc = blk_sgemm(cx, nblk, b, 1, 0, Q, G, S, e); // Qᵀ·G
  if (!rc) rc = neumann_terms(cx, 0, n, G, GA, GA2, GA3, S, e);
  if (!rc) rc = blk_sgemm(cx, nblk, b, 1, 0, Q, S, U, e);
  if (!rc) rc = neumann_terms(cx, 1, n, G, GA, GA2, GA3, U, e);
  if (!rc) rc = blk_sgemm(cx, nblk, b, 1, 0, Q, U, S, e);
  if (!rc) rc = neumann_terms(cx, 2, n, G, GA, GA2, GA3, S, e);
  if (rc) return rc;
  skew_grad_k<<<grid_for(n, 256), 256, 0, cx->stream>>>(nblk, b, S, dtheta);
  ENG_CUDA_LAUNCHED("skew_grad_k", e);
  return 0;
}

// ---- rotations and permutations ------------------------------------------------------

int eng_cuda_poet_rotate(eng_cuda_ctx *cx, int T, int dim, int b, const float *x, int ldx, const float *R, int trans,
                         float *y, int ldy, eng_err *e) {
  ENG_CUDA_REQUIRE(b > 0 && dim % b == 0, e, "eng_cuda_poet_rotate: block size %d does not divide %d", b, dim);
  if (T <= 0 || dim <= 0) return 0;
  // Block k: y[:, kb..kb+b) = x[:, kb..kb+b) · op(R[k]); the blocks' columns
  // are b floats apart in x and y, their matrices b·b apart in R.
  return rm_sgemm(cx, 0, trans, T, b, b, x, ldx, b, R, b, (long long)b * b, 0.0f, y, ldy, b, dim / b, e);
}

int eng_cuda_poet_rotate_dR(eng_cuda_ctx *cx, int T, int dim, int b, const float *x, int ldx, const float *dy,
                            int ldy, float *dR, eng_err *e) {
  ENG_CUDA_REQUIRE(b > 0 && dim % b == 0, e, "eng_cuda_poet_rotate_dR: block size %d does not divide %d", b, dim);
  if (T <= 0 || dim <= 0) return 0;
  return rm_sgemm(cx, 1, 0, b, b, T, x, ldx, b, dy, ldy, b, 1.0f, dR, b, (long long)b * b, dim / b, e);
}

// y[t, j] = x[t, perm[j]] (+ bias[j] where given, the forward's last step):
// reads gathered, writes contiguous.
static __global__ void gather_k(int T, int dim, const int32_t *perm, const float *x, int ldx, float *y, int ldy,
                                const eng_bf16 *bias) {
  size_t n = (size_t)T * dim;
  for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += (size_t)gridDim.x * blockDim.x) {
    size_t t = idx / dim;
    int j = (int)(idx % dim);
    float v = x[t * ldx + perm[j]];
    y[t * ldy + j] = bias ? v + ld_bf16(bias + j) : v;
  }
}

// x[t, perm[j]] (= or +=) y[t, j]: perm is a permutation, so every thread
// owns its destination and += needs no atomics.
static __global__ void scatter_k(int T, int dim, const int32_t *perm, const float *y, int ldy, float *x, int ldx,
                                 int add) {
  size_t n = (size_t)T * dim;
  for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += (size_t)gridDim.x * blockDim.x) {
    size_t t = idx / dim;
    int j = (int)(idx % dim);
    float *d = x + t * ldx + perm[j];
    float v = y[t * ldy + j];
    *d = add ? *d + v : v;
  }
}

static int gather(int T, int dim, const int32_t *perm, const float *x, int ldx, float *y, int ldy,
                  const eng_bf16 *bias, cudaStream_t s, eng_err *e) {
  if (T <= 0 || dim <= 0) return 0;
  gather_k<<<grid_for((size_t)T * dim, 256), 256, 0, s>>>(T, dim, perm, x, ldx, y, ldy, bias);
  ENG_CUDA_LAUNCHED("gather_k", e);
  return 0;
}

int eng_cuda_poet_gather(int T, int dim, const int32_t *perm, const float *x, int ldx, float *y, int ldy,
                         eng_cuda_stream s, eng_err *e) {
  return gather(T, dim, perm, x, ldx, y, ldy, NULL, s, e);
}

int eng_cuda_poet_scatter(int T, int dim, const int32_t *perm, const float *y, int ldy, float *x, int ldx, int add,
                          eng_cuda_stream s, eng_err *e) {
  if (T <= 0 || dim <= 0) return 0;
  scatter_k<<<grid_for((size_t)T * dim, 256), 256, 0, s>>>(T, dim, perm, y, ldy, x, ldx, add);
  ENG_CUDA_LAUNCHED("scatter_k", e);
  return 0;
}

// ---- one weight ----------------------------------------------------------------------

// The work of the forward and the backward, carved the same way for sizing
// (base NULL) and use; every piece starts 256-byte aligned, so the products
// of the fast and the memory mode see the same alignments, hence the same
// cuBLASLt plans, as long as the caller's kept z is 256-byte aligned too.
typedef struct poet_work {
  float *W0f;    // [m, n]: W0 widened (cuBLASLt multiplies operands of one type)
  float *u, *v;  // forward: [T, n] and [T, max(n, m)]; backward: u and nb, [T, n] each
  float *z, *w;  // forward: the product when z is not kept, [T, m]; backward: dw and mb, [T, m] each
} poet_work;

static size_t poet_work_layout(const eng_cuda_poet_weight *w, int T, int bwd, void *base, poet_work *pw) {
  eng_cuda_carve cv = {(char *)base, 0};
  size_t tn = (size_t)T * w->n, tm = (size_t)T * w->m, f = sizeof(float);
  size_t wide = (size_t)T * (w->n > w->m ? w->n : w->m);
  pw->W0f = (float *)eng_cuda_carve_take(&cv, (size_t)w->m * w->n * f);
  pw->u = (float *)eng_cuda_carve_take(&cv, tn * f);
  pw->v = (float *)eng_cuda_carve_take(&cv, (bwd ? tn : wide) * f);
  pw->z = (float *)eng_cuda_carve_take(&cv, tm * f);
  pw->w = bwd ? (float *)eng_cuda_carve_take(&cv, tm * f) : NULL;
  return cv.off;
}

size_t eng_cuda_poet_fwd_work_bytes(const eng_cuda_poet_weight *w, int T) {
  poet_work pw;
  return poet_work_layout(w, T, 0, NULL, &pw);
}

size_t eng_cuda_poet_bwd_work_bytes(const eng_cuda_poet_weight *w, int T) {
  poet_work pw;
  return poet_work_layout(w, T, 1, NULL, &pw);
}

static int check_weight(const eng_cuda_poet_weight *w, const char *fn, eng_err *e) {
  ENG_CUDA_REQUIRE(w->b > 0 && w->m % w->b == 0 && w->n % w->b == 0, e,
                   "%s: block size %d does not divide the weight's %d×%d", fn, w->b, w->m, w->n);
  return 0;
}

// z [T, m] = (x gathered by pin) · diag(R_in) · W0ᵀ, linear.c's to_z; u and
// v are [T, n] each, W0f the widened W0.
static int to_z(eng_cuda_ctx *cx, const eng_cuda_poet_weight *w, int T, const float *x, int ldx, const float *W0f,
                float *z, float *u, float *v, eng_err *e) {
  int rc = gather(T, w->n, w->pin, x, ldx, u, w->n, NULL, cx->stream, e);
  if (!rc) rc = eng_cuda_poet_rotate(cx, T, w->n, w->b, u, w->n, w->Rin, 0, v, w->n, e);
  if (!rc) rc = rm_sgemm(cx, 0, 1, T, w->m, w->n, v, w->n, 0, W0f, w->n, 0, 0.0f, z, w->m, 0, 1, e);
  return rc;
}

int eng_cuda_poet_forward(eng_cuda_ctx *cx, const eng_cuda_poet_weight *w, int T, const float *x, int ldx, float *y,
                          int ldy, float *z, void *work, eng_err *e) {
  int rc = check_weight(w, "eng_cuda_poet_forward", e);
  if (rc || T <= 0) return rc;
  poet_work pw;
  poet_work_layout(w, T, 0, work, &pw);
  float *zz = z ? z : pw.z, *rot = pw.v; // v is done with once z is there; it has room for [T, m]
  rc = eng_cuda_bf16_to_f32(pw.W0f, w->W0, (size_t)w->m * w->n, cx->stream, e);
  if (!rc) rc = to_z(cx, w, T, x, ldx, pw.W0f, zz, pw.u, pw.v, e);
  if (!rc) rc = eng_cuda_poet_rotate(cx, T, w->m, w->b, zz, w->m, w->Rout, 0, rot, w->m, e);
  if (!rc) rc = gather(T, w->m, w->pout, rot, w->m, y, ldy, w->bias, cx->stream, e);
  return rc;
}

// linear.c's backward, step for step: dw = dy scattered by pout; z kept or
// recomputed; dR_out += zᵀ·dw; dz = dw·diag(R_out)ᵀ; dv = dz·W0;
// dR_in += uᵀ·dv; du = dv·diag(R_in)ᵀ; dx (= or +=) du scattered by pin.
int eng_cuda_poet_backward(eng_cuda_ctx *cx, const eng_cuda_poet_weight *w, int T, const float *x, int ldx,
                           const float *z, const float *dy, int lddy, float *dx, int lddx, int add, float *dRin,
                           float *dRout, void *work, eng_err *e) {
  int rc = check_weight(w, "eng_cuda_poet_backward", e);
  if (rc || T <= 0) return rc;
  poet_work pw;
  poet_work_layout(w, T, 1, work, &pw);
  float *u = pw.u, *nb = pw.v, *mb = pw.z, *dw = pw.w;
  int m = w->m, n = w->n;
  rc = eng_cuda_bf16_to_f32(pw.W0f, w->W0, (size_t)m * n, cx->stream, e);
  if (!rc) rc = eng_cuda_poet_scatter(T, m, w->pout, dy, lddy, dw, m, 0, cx->stream, e);
  if (!rc && !z) { // the memory mode: z again, from x (u stays for dR_in)
    rc = to_z(cx, w, T, x, ldx, pw.W0f, mb, u, nb, e);
    z = mb;
  } else if (!rc) {
    rc = gather(T, n, w->pin, x, ldx, u, n, NULL, cx->stream, e);
  }
  // Each step reads its inputs before the next overwrites them: the stream
  // runs them in order.
  if (!rc) rc = eng_cuda_poet_rotate_dR(cx, T, m, w->b, z, m, dw, m, dRout, e);
  if (!rc) rc = eng_cuda_poet_rotate(cx, T, m, w->b, dw, m, w->Rout, 1, mb, m, e);              // dz
  if (!rc) rc = rm_sgemm(cx, 0, 0, T, n, m, mb, m, 0, pw.W0f, n, 0, 0.0f, nb, n, 0, 1, e);   // dv = dz · W0
  if (!rc) rc = eng_cuda_poet_rotate_dR(cx, T, n, w->b, u, n, nb, n, dRin, e);
  if (!rc) rc = eng_cuda_poet_rotate(cx, T, n, w->b, nb, n, w->Rin, 1, u, n, e);                // du
  if (!rc) rc = eng_cuda_poet_scatter(T, n, w->pin, u, n, dx, lddx, add, cx->stream, e);
  return rc;
}
