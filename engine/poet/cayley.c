// The Cayley–Neumann map θ → R of POET-X's rotation blocks and its backward
// (poet.h).
#include <math.h>
#include <string.h>

#include "kernels/cpu/gemm.h"
#include "poet/poet.h"

// Q [b][b] from the strict upper triangle theta (row-major).
static void skew(int b, const float *theta, float *Q) {
  size_t t = 0;
  for (int i = 0; i < b; i++) {
    Q[(size_t)i * b + i] = 0.0f;
    for (int j = i + 1; j < b; j++, t++) {
      Q[(size_t)i * b + j] = theta[t];
      Q[(size_t)j * b + i] = -theta[t];
    }
  }
}

// A = c·I + A.
static void add_eye(int b, float c, float *A) {
  for (int i = 0; i < b; i++) A[(size_t)i * b + i] += c;
}

// R = I + 2Q + 2Q² + 2Q³ + Q⁴ by Horner: I + Q(2I + Q(2I + Q(2I + Q))).
void eng_poet_cayley(int nblk, int b, const float *theta, float *R, float *work) {
  size_t bb = (size_t)b * b;
  float *Q = work, *S = work + bb;
  for (int k = 0; k < nblk; k++) {
    float *r = R + (size_t)k * bb;
    skew(b, theta + (size_t)k * eng_poet_tri(b), Q);
    memcpy(S, Q, bb * sizeof *S);
    add_eye(b, 2.0f, S);                                           // 2I + Q
    eng_k_sgemm(0, 0, b, b, b, Q, b, S, b, 0.0f, r, b);             // Q(2I + Q)
    add_eye(b, 2.0f, r);
    eng_k_sgemm(0, 0, b, b, b, Q, b, r, b, 0.0f, S, b);             // Q(2I + Q(2I + Q))
    add_eye(b, 2.0f, S);
    eng_k_sgemm(0, 0, b, b, b, Q, b, S, b, 0.0f, r, b);
    add_eye(b, 1.0f, r);
  }
}

// With A = Qᵀ and G = dL/dR, dL/dQ = Σ_s c_s Σ_{p+q=s} A^p G A^q with
// c = 2, 2, 2, 1 for s = 0..3 (the terms 2Q, 2Q², 2Q³, Q⁴ of R), which is
// T0 + A(T1 + A(T2 + A·T3)) for T_p = Σ_q c_{p+q} G A^q. A skew Q moves θ_ij
// into Q_ij and −θ_ij into Q_ji: dθ_ij = (dL/dQ)_ij − (dL/dQ)_ji.
void eng_poet_cayley_bwd(int nblk, int b, const float *theta, const float *dR, float *dtheta, float *work) {
  size_t bb = (size_t)b * b;
  float *Q = work, *GA = work + bb, *GA2 = work + 2 * bb, *GA3 = work + 3 * bb, *S = work + 4 * bb,
        *U = work + 5 * bb;
  for (int k = 0; k < nblk; k++) {
    const float *G = dR + (size_t)k * bb;
    skew(b, theta + (size_t)k * eng_poet_tri(b), Q);
    eng_k_sgemm(0, 1, b, b, b, G, b, Q, b, 0.0f, GA, b);   // G·Qᵀ
    eng_k_sgemm(0, 1, b, b, b, GA, b, Q, b, 0.0f, GA2, b); // G·(Qᵀ)²
    eng_k_sgemm(0, 1, b, b, b, GA2, b, Q, b, 0.0f, GA3, b);
    // S = T2 + A·T3 = 2G + GA + Qᵀ·G
    eng_k_sgemm(1, 0, b, b, b, Q, b, G, b, 0.0f, S, b);
    for (size_t i = 0; i < bb; i++) S[i] += 2.0f * G[i] + GA[i];
    // U = T1 + A·S, T1 = 2G + 2GA + GA²
    eng_k_sgemm(1, 0, b, b, b, Q, b, S, b, 0.0f, U, b);
    for (size_t i = 0; i < bb; i++) U[i] += 2.0f * G[i] + 2.0f * GA[i] + GA2[i];
    // S = T0 + A·U, T0 = 2G + 2GA + 2GA² + GA³
    eng_k_sgemm(1, 0, b, b, b, Q, b, U, b, 0.0f, S, b);
    for (size_t i = 0; i < bb; i++) S[i] += 2.0f * (G[i] + GA[i] + GA2[i]) + GA3[i];
    float *d = dtheta + (size_t)k * eng_poet_tri(b);
    size_t t = 0;
    for (int i = 0; i < b; i++)
      for (int j = i + 1; j < b; j++, t++) d[t] += S[(size_t)i * b + j] - S[(size_t)j * b + i];
  }
}

double eng_poet_orth_err(int nblk, int b, const float *R) {
  double worst = 0;
  size_t bb = (size_t)b * b;
  for (int k = 0; k < nblk; k++) {
    const float *r = R + (size_t)k * bb;
    double sum = 0;
    for (int i = 0; i < b; i++)
      for (int j = 0; j < b; j++) {
        double d = i == j ? -1.0 : 0.0; // (RᵀR)_ij − I_ij
        for (int l = 0; l < b; l++) d += (double)r[(size_t)l * b + i] * r[(size_t)l * b + j];
        sum += d * d;
      }
    if (sqrt(sum) > worst) worst = sqrt(sum);
  }
  return worst;
}
