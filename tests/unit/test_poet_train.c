// POET-X training of one weight (engine/poet/poet.h): θ learns, with Adam
// (eps 1e-6, no weight decay) and the clipping ramp after each merge, to
// match a teacher in the weight's orbit (the same W0 under rotations of its
// own); 100 updates with a merge every 20. Checks:
//   - the loss falls (to under a fifth of where it starts);
//   - a merge changes nothing the layer computes (effective weight before
//     and after, to fp32 rounding), and resets θ to zero;
//   - the spectrum: the singular values of the final effective weight equal
//     those of the initial W0 within the bound the measured orthogonality
//     errors give: each rotation's singular values lie in
//     [sqrt(1 - e), sqrt(1 + e)] for e = |RᵀR - I|_F, so σ_i(R_out·W·R_in)
//     lies within σ_i(W)·(1 ± e)^(±1) per merge, compounding over merges;
//   - the ramp: 0.1 right after a merge, 1 ten updates later and before the
//     first merge.
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/rng.h"
#include "optim/adamw.h"
#include "poet/poet.h"

enum { M = 48, N = 32, B = 16, T = 64, STEPS = 100, MERGE_EVERY = 20 };

// LAPACK (OpenBLAS carries it): singular values only.
void dgesvd_(const char *jobu, const char *jobvt, const int *m, const int *n, double *a, const int *lda, double *s,
             double *u, const int *ldu, double *vt, const int *ldvt, double *work, const int *lwork, int *info);

static void singular_values(const float *W, double *s) {
  double a[M * N], work[1024], none = 0;
  for (int i = 0; i < M; i++) // column-major for LAPACK
    for (int j = 0; j < N; j++) a[(size_t)j * M + i] = W[(size_t)i * N + j];
  int m = M, n = N, one = 1, lwork = 1024, info = 0;
  dgesvd_("N", "N", &m, &n, a, &m, s, &none, &one, &none, &one, work, &lwork, &info);
  CHECK(info == 0, "dgesvd: info %d", info);
}

typedef struct poet1 {
  float W0[M * N];
  int32_t pin[N], pout[M];
  float theta[(N / B + M / B) * (B * (B - 1) / 2)]; // in, then out
  float rin[N * B], rout[M * B];
} poet1;

static void rotations(poet1 *p, float *cw) {
  size_t tri = eng_poet_tri(B);
  eng_poet_cayley(N / B, B, p->theta, p->rin, cw);
  eng_poet_cayley(M / B, B, p->theta + (N / B) * tri, p->rout, cw);
}

static eng_poet_weight weight_of(const poet1 *p) { return (eng_poet_weight){M, N, B, p->W0, NULL, p->pin, p->pout, p->rin, p->rout}; }

int main(void) {
  CHECK(eng_poet_clip_ramp(0, 20) == 1.0f && eng_poet_clip_ramp(19, 20) == 1.0f, "ramp before the first merge");
  CHECK(eng_poet_clip_ramp(20, 20) == 0.1f && eng_poet_clip_ramp(25, 20) == 0.1f + 0.9f * 0.5f &&
            eng_poet_clip_ramp(30, 20) == 1.0f && eng_poet_clip_ramp(40, 20) == 0.1f,
        "the ramp after a merge: %g %g %g", eng_poet_clip_ramp(20, 20), eng_poet_clip_ramp(25, 20),
        eng_poet_clip_ramp(30, 20));

  eng_rng rng;
  eng_rng_seed(&rng, 16, 0);
  size_t tri = eng_poet_tri(B), nth = (N / B + M / B) * tri;
  static poet1 st, teacher;
  static float cw[6 * B * B];
  float *merge_work = malloc(eng_poet_merge_work(M, N, B) * sizeof(float));
  // W0: Gaussian rows scaled to unit norm (the from-scratch initialisation).
  for (int i = 0; i < M; i++) {
    double norm = 0;
    for (int j = 0; j < N; j++) norm += pow(st.W0[i * N + j] = (float)eng_rng_normal(&rng), 2);
    for (int j = 0; j < N; j++) st.W0[i * N + j] /= (float)sqrt(norm);
  }
  eng_poet_perm(&rng, N, st.pin);
  eng_poet_perm(&rng, M, st.pout);
  teacher = st;
  for (size_t i = 0; i < nth; i++) teacher.theta[i] = 0.03f * (float)eng_rng_normal(&rng);
  rotations(&teacher, cw);
  double s0[N], s[N];
  singular_values(st.W0, s0);

  // Inputs and the teacher's outputs.
  static float x[T * N], target[T * M], y[T * M], dy[T * M], dx[T * N], work[T * 2 * (M + N)];
  for (int i = 0; i < T * N; i++) x[i] = (float)eng_rng_normal(&rng);
  eng_poet_weight tw = weight_of(&teacher);
  eng_poet_forward(&tw, T, x, N, target, M, NULL, work);

  static float dR[(N + M) * B], g[(N / B + M / B) * (B * (B - 1) / 2)], m1[sizeof g / sizeof *g],
      m2[sizeof g / sizeof *g];
  double first = -1, last = 0, up = 1, down = 1;
  int64_t t = 0; // Adam steps since the last merge
  int merges = 0;
  for (int step = 0; step < STEPS; step++) {
    rotations(&st, cw);
    eng_poet_weight w = weight_of(&st);
    eng_poet_forward(&w, T, x, N, y, M, NULL, work);
    double loss = 0;
    for (int i = 0; i < T * M; i++) {
      float d = y[i] - target[i];
      loss += 0.5 * (double)d * d / T;
      dy[i] = d / T;
    }
    if (first < 0) first = loss;
    last = loss;
    memset(dR, 0, sizeof dR);
    memset(g, 0, sizeof g);
    eng_poet_backward(&w, T, x, N, NULL, dy, M, dx, N, 0, dR, dR + N * B, work);
    eng_poet_cayley_bwd(N / B, B, st.theta, dR, g, cw);
    eng_poet_cayley_bwd(M / B, B, st.theta + (N / B) * tri, dR + N * B, g + (N / B) * tri, cw);
    double norm = 0;
    for (size_t i = 0; i < nth; i++) norm += (double)g[i] * g[i];
    norm = sqrt(norm);
    float thr = 1.0f * eng_poet_clip_ramp(step, MERGE_EVERY), clip = norm > thr ? (float)(thr / (norm + 1e-6)) : 1.0f;
    eng_adamw_update(st.theta, g, m1, m2, nth, 1e-2f, 0.0f, 0.9f, 0.999f, 1e-6f, clip, ++t);
    if ((step + 1) % MERGE_EVERY == 0) {
      static float before[M * N], after[M * N];
      float *ew = merge_work; // the effective weight's work fits in a merge's
      rotations(&st, cw);
      eng_poet_weight wb = weight_of(&st);
      eng_poet_effective(&wb, before, ew);
      double e = eng_poet_merge(M, N, B, st.W0, NULL, st.theta, st.theta + (N / B) * tri, st.pin, st.pout, &rng, merge_work);
      up *= 1 + e;
      down *= 1 - e;
      memset(m1, 0, sizeof m1);
      memset(m2, 0, sizeof m2);
      t = 0;
      for (size_t i = 0; i < nth; i++) CHECK(st.theta[i] == 0.0f, "θ[%zu] is not zero after the merge", i);
      rotations(&st, cw);
      eng_poet_weight wa = weight_of(&st);
      eng_poet_effective(&wa, after, ew);
      double md = 0, mr = 0;
      for (int i = 0; i < M * N; i++) {
        md = fmax(md, fabs((double)after[i] - before[i]));
        mr = fmax(mr, fabs((double)before[i]));
      }
      CHECK(md <= 1e-6 * mr, "the merge after update %d changed the effective weight by %.2e of its largest entry", step + 1,
            md / mr);
      merges++;
      printf("update %3d: loss %.6f, merged (orthogonality error %.2e; effective weight unchanged to %.1e)\n", step + 1,
             loss, e, md / mr);
    }
  }
  CHECK(merges == STEPS / MERGE_EVERY, "%d merges", merges);
  printf("loss %.6f -> %.6f over %d updates\n", first, last, STEPS);
  CHECK(last < 0.2 * first, "the loss fell only from %g to %g", first, last);

  // The spectrum after the merges (θ is zero after the last one).
  singular_values(st.W0, s);
  double worst = 0, slack = 1e-5; // fp32 products over five merges
  for (int i = 0; i < N; i++) {
    double r = s[i] / s0[i];
    worst = fmax(worst, fabs(r - 1));
    CHECK(r <= up * (1 + slack) && r >= down * (1 - slack), "σ_%d moved by a factor %.8f, outside [%.8f, %.8f]", i, r,
          down, up);
  }
  printf("singular values: largest relative change %.2e, the bound from the orthogonality errors [%.2e, %.2e]\n", worst,
         down - 1, up - 1);
  free(merge_work);
  printf("ok\n");
  return 0;
}
