// The gated delta rule (Gated DeltaNet's token mixer), forward and backward,
// as a scan over tokens per (sequence, value head) with the state S [kd, vd]
// held in cache:
//   S ← a·S, w = v − Sᵀk, S ← S + k·(β·w)ᵀ, o = Sᵀ(q/√kd),   a = exp(g)
// which is the recurrence transformers' chunked form computes in blocks.
// The forward keeps S at every chunk's start (ENG_K_DR_CHUNK tokens); the
// backward replays one chunk from its kept state, keeping the chunk's states
// (per thread, freed before it returns), then walks its tokens back:
//   dS += q̂·doᵀ          dq = S_t·do / √kd
//   du = dSᵀk            dk += dS·u − a·S_{t−1}·dw,   dw = β·du,  dv = dw
//   dβ = du·w            dg = a·(⟨dS, S_{t−1}⟩ − dw·(S_{t−1}ᵀk))
//   dS ← a·(dS − k·dwᵀ)
// A record start of a packed row (pos 0 at t > 0) sets S to 0 before its
// token, so no gradient crosses it either. Work is split by (sequence, key
// head); the value heads a key head serves run in order on one thread, so
// dq and dk add up in the same order whatever the thread count.
#include "kernels/kernels.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kmath.h"

enum { C = ENG_K_DR_CHUNK };

static int resets(const int32_t *pos, int b, int T, int t) { return pos && t > 0 && pos[(size_t)b * T + t] == 0; }

// One token: S ← a·S; w = v − Sᵀk (into w); S += k·(β·w)ᵀ; o = Sᵀq̂.
static void step(float *restrict S, float *restrict w, float *restrict o, const float *restrict qs,
                 const float *restrict k, const float *restrict v, float a, float beta, int kd, int vd) {
  for (int j = 0; j < vd; j++) w[j] = 0;
  for (int i = 0; i < kd; i++) {
    float *restrict s = S + (size_t)i * vd;
    for (int j = 0; j < vd; j++) {
      s[j] = s[j] * a;
      w[j] = fmaf(s[j], k[i], w[j]);
    }
  }
  for (int j = 0; j < vd; j++) w[j] = v[j] - w[j];
  if (o)
    for (int j = 0; j < vd; j++) o[j] = 0;
  for (int i = 0; i < kd; i++) {
    float *restrict s = S + (size_t)i * vd;
    for (int j = 0; j < vd; j++) s[j] = fmaf(k[i], beta * w[j], s[j]);
    if (o)
      for (int j = 0; j < vd; j++) o[j] = fmaf(s[j], qs[i], o[j]);
  }
}

static void scale_q(float *qs, const float *q, int kd) {
  const float scale = 1.0f / sqrtf((float)kd);
  for (int i = 0; i < kd; i++) qs[i] = q[i] * scale;
}

size_t eng_k_deltarule_states_floats(int B, int T, int Hv, int kd, int vd) {
  return (size_t)B * Hv * ((T + C - 1) / C) * kd * vd;
}

void eng_k_deltarule_fwd(float *out, float *states, const float *q, int ldq, const float *k, int ldk, const float *v,
                         int ldv, const float *g, const float *beta, int ldg, const int32_t *pos, int B, int T, int Hk,
                         int Hv, int kd, int vd) {
  const int NC = (T + C - 1) / C, per = Hv / Hk;
  const size_t ss = (size_t)kd * vd;
#pragma omp parallel if (eng_k_team((size_t)B * T * Hv * ss))
  {
    float *S = malloc(sizeof(float) * (ss + (size_t)vd + (size_t)kd));
    if (!S) abort(); // one state: out of memory here is not recoverable
    float *w = S + ss, *qs = w + vd;
#pragma omp for schedule(static)
    for (int bh = 0; bh < B * Hv; bh++) {
      const int b = bh / Hv, h = bh % Hv, kh = h / per;
      memset(S, 0, sizeof(float) * ss);
      for (int t = 0; t < T; t++) {
        const size_t r = (size_t)b * T + t;
        if (t % C == 0) memcpy(states + (((size_t)b * Hv + h) * NC + t / C) * ss, S, sizeof(float) * ss);
        if (resets(pos, b, T, t)) memset(S, 0, sizeof(float) * ss);
        scale_q(qs, q + r * ldq + (size_t)kh * kd, kd);
        step(S, w, out + r * ((size_t)Hv * vd) + (size_t)h * vd, qs, k + r * ldk + (size_t)kh * kd,
             v + r * ldv + (size_t)h * vd, eng_k_expf(g[r * ldg + h]), beta[r * ldg + h], kd, vd);
      }
    }
    free(S);
  }
}

void eng_k_deltarule_bwd(float *dq, float *dk, float *dv, float *dg, float *dbeta, int ldd, const float *dout,
                         const float *states, const float *q, int ldq, const float *k, int ldk, const float *v,
                         int ldv, const float *g, const float *beta, int ldg, const int32_t *pos, int B, int T, int Hk,
                         int Hv, int kd, int vd) {
  const int NC = (T + C - 1) / C, per = Hv / Hk;
  const size_t ss = (size_t)kd * vd;
#pragma omp parallel if (eng_k_team((size_t)B * T * Hv * ss))
  {
    // The chunk's states S_{t0−1} .. S_{t1−1} (before any reset), dS, and
    // vectors of vd and kd.
    float *buf = malloc(sizeof(float) * ((C + 2) * ss + 3 * (size_t)vd + (size_t)kd));
    if (!buf) abort(); // (C + 2) states: out of memory here is not recoverable
    float *Sc = buf, *dS = Sc + (C + 1) * ss, *w = dS + ss, *du = w + vd, *skr = du + vd, *qs = skr + vd;
#pragma omp for schedule(static)
    for (int bk = 0; bk < B * Hk; bk++) {
      const int b = bk / Hk, kh = bk % Hk;
      for (int t = 0; t < T; t++) {
        const size_t r = (size_t)b * T + t;
        memset(dq + r * ldq + (size_t)kh * kd, 0, sizeof(float) * kd);
        memset(dk + r * ldk + (size_t)kh * kd, 0, sizeof(float) * kd);
      }
      for (int h = kh * per; h < (kh + 1) * per; h++) {
        memset(dS, 0, sizeof(float) * ss);
        for (int c = NC - 1; c >= 0; c--) {
          const int t0 = c * C, t1 = t0 + C < T ? t0 + C : T;
          // Replay: Sc[i] is the state before token t0 + i (before its reset).
          memcpy(Sc, states + (((size_t)b * Hv + h) * NC + c) * ss, sizeof(float) * ss);
          for (int t = t0; t < t1; t++) {
            const size_t r = (size_t)b * T + t;
            float *S = Sc + (size_t)(t - t0 + 1) * ss;
            if (resets(pos, b, T, t)) memset(S, 0, sizeof(float) * ss);
            else memcpy(S, S - ss, sizeof(float) * ss);
            step(S, w, NULL, NULL, k + r * ldk + (size_t)kh * kd, v + r * ldv + (size_t)h * vd,
                 eng_k_expf(g[r * ldg + h]), beta[r * ldg + h], kd, vd);
          }
          for (int t = t1 - 1; t >= t0; t--) {
            const size_t r = (size_t)b * T + t;
            const float *St = Sc + (size_t)(t - t0 + 1) * ss;
            const float *Sp = resets(pos, b, T, t) ? NULL : St - ss; // S_{t−1} as the token reads it
            const float *kt = k + r * ldk + (size_t)kh * kd, *vt = v + r * ldv + (size_t)h * vd;
            const float *dot = dout + r * ((size_t)Hv * vd) + (size_t)h * vd;
            const float a = eng_k_expf(g[r * ldg + h]), bt = beta[r * ldg + h];
            float *dqt = dq + r * ldq + (size_t)kh * kd, *dkt = dk + r * ldk + (size_t)kh * kd;
            scale_q(qs, q + r * ldq + (size_t)kh * kd, kd);
            const float scale = 1.0f / sqrtf((float)kd);
            // o = S_tᵀq̂: dq and dS; in the same pass over the rows, skr =
            // S_{t−1}ᵀk and w = v − (a·S_{t−1})ᵀk as the forward's step formed it.
            for (int j = 0; j < vd; j++) skr[j] = 0, w[j] = 0, du[j] = 0;
            for (int i = 0; i < kd; i++) {
              const float *s = St + (size_t)i * vd;
              dqt[i] += eng_k_dot_row(s, dot, (size_t)vd) * scale;
              float *d = dS + (size_t)i * vd;
              for (int j = 0; j < vd; j++) d[j] = fmaf(qs[i], dot[j], d[j]);
              if (!Sp) continue;
              const float *sp = Sp + (size_t)i * vd;
              for (int j = 0; j < vd; j++) {
                skr[j] = fmaf(sp[j], kt[i], skr[j]);
                w[j] = fmaf(sp[j] * a, kt[i], w[j]);
              }
            }
            for (int j = 0; j < vd; j++) w[j] = vt[j] - w[j];
            // S_t = a·S_{t−1} + k·uᵀ, u = β·w: du = dSᵀk, dk += dS·u.
            for (int i = 0; i < kd; i++) {
              const float *d = dS + (size_t)i * vd;
              float acc = 0;
              for (int j = 0; j < vd; j++) {
                du[j] = fmaf(d[j], kt[i], du[j]);
                acc = fmaf(d[j], bt * w[j], acc);
              }
              dkt[i] += acc;
            }
            // dβ = du·w; dw = β·du (= dv); w = v − a·S_{t−1}ᵀk gives a and k
            // their parts, and so does S_t's a·S_{t−1}.
            float dbt = 0, da = 0;
            float *dvt = dv + r * ldv + (size_t)h * vd;
            for (int j = 0; j < vd; j++) {
              dbt = fmaf(du[j], w[j], dbt);
              dvt[j] = bt * du[j];
              da = fmaf(-dvt[j], skr[j], da);
            }
            // Row by row: S_{t−1}'s parts of dk and da, then dS_{t−1} =
            // a·(dS − k·dwᵀ); nothing crosses a record start.
            for (int i = 0; i < kd; i++) {
              float *d = dS + (size_t)i * vd;
              if (!Sp) {
                memset(d, 0, sizeof(float) * vd);
                continue;
              }
              const float *s = Sp + (size_t)i * vd;
              dkt[i] -= a * eng_k_dot_row(s, dvt, (size_t)vd);
              da += eng_k_dot_row(d, s, (size_t)vd);
              for (int j = 0; j < vd; j++) d[j] = a * fmaf(-kt[i], dvt[j], d[j]);
            }
            dg[r * ldd + h] = da * a;
            dbeta[r * ldd + h] = dbt;
          }
        }
      }
    }
    free(buf);
  }
}
