// The MPI collectives (engine/dist/coll.h) in real MPI processes: run
// without a launcher, this program starts itself under `mpirun -np 2` and
// `-np 4` (oversubscribed on a small machine) and passes when every rank
// does. Each rank checks, against the sum it computes itself in rank order
// from every rank's data (which each rank can make: it is a function of the
// rank), that all_reduce, reduce_scatter, all_gather and broadcast give
// exactly those bits in fp32 and bf16, for counts that do not divide among
// the ranks, are smaller than the world, or are empty; that the bits are the
// same when repeated; and that the order matters for this data (so equal
// bits are evidence of the order, not luck).
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/bf16.h"
#include "dist/coll.h"
#include "dist/dist.h"
#include "launch.h"

// Rank r's element i: signs, magnitudes over 2^-20 .. 2^20, so that fp32
// addition is far from associative on it.
static float value(int r, size_t i) {
  uint64_t h = (uint64_t)(r + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t)(i + 7) * 0xC2B2AE3D27D4EB4Full;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  float m = (float)(h & 0xFFFFFF) / (float)0x1000000 + 0.5f;
  int ex = (int)((h >> 24) % 41) - 20;
  return ((h >> 40) & 1 ? -m : m) * ldexpf(1.0f, ex);
}

static void fill(void *buf, size_t n, int r, eng_coll_dtype t) {
  for (size_t i = 0; i < n; i++) {
    if (t == ENG_COLL_F32) ((float *)buf)[i] = value(r, i);
    else ((uint16_t *)buf)[i] = eng_bf16_from_f32(value(r, i));
  }
}

// The rank-order sum of element i (reverse: the other order).
static uint32_t ref_bits(int W, size_t i, eng_coll_dtype t, int reverse) {
  float acc = 0;
  for (int k = 0; k < W; k++) {
    int r = reverse ? W - 1 - k : k;
    float v = t == ENG_COLL_F32 ? value(r, i) : eng_bf16_to_f32(eng_bf16_from_f32(value(r, i)));
    acc = k ? acc + v : v;
  }
  if (t == ENG_COLL_BF16) return eng_bf16_from_f32(acc);
  uint32_t b;
  memcpy(&b, &acc, 4);
  return b;
}

static uint32_t bits(const void *buf, size_t i, eng_coll_dtype t) {
  if (t == ENG_COLL_BF16) return ((const uint16_t *)buf)[i];
  uint32_t b;
  memcpy(&b, (const float *)buf + i, 4);
  return b;
}

static void check_all(eng_coll *c) {
  const int W = c->world, R = c->rank;
  eng_err e = {0};
  const size_t counts[] = {0, 1, (size_t)W - 1, (size_t)W + 1, 1000, 65537};
  size_t order_matters = 0;
  for (int ti = 0; ti < 2; ti++) {
    eng_coll_dtype t = ti ? ENG_COLL_BF16 : ENG_COLL_F32;
    const char *tn = ti ? "bf16" : "f32";
    for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
      size_t n = counts[ci];
      void *buf = malloc(n * 4 + 4), *first = malloc(n * 4 + 4);
      for (int rep = 0; rep < 2; rep++) {
        fill(buf, n, R, t);
        CHECK_OK(c->ops->all_reduce(c, buf, n, t, &e), &e);
        for (size_t i = 0; i < n; i++)
          CHECK(bits(buf, i, t) == ref_bits(W, i, t, 0), "rank %d: all_reduce %s n=%zu: element %zu is not the rank-order sum",
                R, tn, n, i);
        if (rep) CHECK(!memcmp(buf, first, n * (ti ? 2 : 4)), "all_reduce %s n=%zu: other bits when repeated", tn, n);
        memcpy(first, buf, n * (ti ? 2 : 4));
      }
      for (size_t i = 0; i < n; i++) order_matters += ref_bits(W, i, t, 0) != ref_bits(W, i, t, 1);

      fill(buf, n, R, t);
      CHECK_OK(c->ops->reduce_scatter(c, buf, n, t, &e), &e);
      size_t off, k;
      eng_coll_slice(n, W, R, &off, &k);
      for (size_t i = 0; i < n; i++) {
        float own = value(R, i); // outside our slice: left as it was
        uint32_t want = i >= off && i < off + k ? ref_bits(W, i, t, 0)
                        : t == ENG_COLL_F32     ? bits(&own, 0, t)
                                                : eng_bf16_from_f32(own);
        CHECK(bits(buf, i, t) == want, "rank %d: reduce_scatter %s n=%zu: element %zu", R, tn, n, i);
      }

      // all_gather: each rank's slice holds its own values, the rest garbage.
      for (size_t i = 0; i < n; i++) {
        if (t == ENG_COLL_F32) ((float *)buf)[i] = i >= off && i < off + k ? value(R, i) : NAN;
        else ((uint16_t *)buf)[i] = i >= off && i < off + k ? eng_bf16_from_f32(value(R, i)) : 0x7FC0;
      }
      CHECK_OK(c->ops->all_gather(c, buf, n, t, &e), &e);
      for (int r = 0; r < W; r++) {
        size_t o, kk;
        eng_coll_slice(n, W, r, &o, &kk);
        for (size_t i = o; i < o + kk; i++) {
          float v = value(r, i);
          uint32_t want = t == ENG_COLL_F32 ? bits(&v, 0, t) : eng_bf16_from_f32(v);
          CHECK(bits(buf, i, t) == want, "rank %d: all_gather %s n=%zu: element %zu (rank %d's)", R, tn, n, i, r);
        }
      }

      fill(buf, n, R, t);
      CHECK_OK(c->ops->broadcast(c, buf, n, t, W - 1, &e), &e);
      for (size_t i = 0; i < n; i++) {
        float v = value(W - 1, i);
        uint32_t want = t == ENG_COLL_F32 ? bits(&v, 0, t) : eng_bf16_from_f32(v);
        CHECK(bits(buf, i, t) == want, "rank %d: broadcast %s n=%zu: element %zu", R, tn, n, i);
      }
      free(buf);
      free(first);
    }
  }
  CHECK_OK(c->ops->barrier(c, &e), &e);
  // Two addends commute exactly; from three on the order shows.
  if (W >= 3)
    CHECK(order_matters > 100, "the data do not tell summation orders apart (%zu elements differ)", order_matters);
  if (R == 0)
    printf("world %d: every collective gave the rank-order sums' bits (%zu elements where the reverse order differs)\n",
           W, order_matters);
}

int main(void) {
  eng_dist_env env;
  eng_err e = {0};
  CHECK_OK(eng_dist_env_read(&env, (const char *(*)(const char *))getenv, &e), &e);
  if (env.launcher == ENG_DIST_SINGLE) {
    for (int np = 2; np <= 4; np += 2) {
      int rc = dist_launch(np);
      CHECK(rc == 0, "mpirun -np %d exited %d (127: mpirun is missing; run deploy/install-deps.sh)", np, rc);
    }
    printf("ok\n");
    return 0;
  }
  eng_coll *c = dist_rank_open();
  CHECK(c->rank == env.rank && c->world == env.world, "MPI says rank %d of %d, the launcher %d of %d", c->rank,
        c->world, env.rank, env.world);
  check_all(c);
  // The planner's measure of the all-reduce: finite, positive, rank 0's on
  // every rank.
  double rate[2];
  CHECK_OK(eng_coll_rate(c, (size_t)1 << 20, 3, &rate[0], &rate[1], &e), &e);
  double r0[2] = {rate[0], rate[1]};
  CHECK(rate[0] > 0 && isfinite(rate[0]) && rate[1] > 0 && isfinite(rate[1]), "rank %d: eng_coll_rate %g B/s, %g s",
        c->rank, rate[0], rate[1]);
  CHECK_OK(c->ops->broadcast(c, r0, 2, ENG_COLL_F64, 0, &e), &e);
  CHECK(!memcmp(r0, rate, sizeof rate), "rank %d: its rate is not rank 0's", c->rank);
  if (c->rank == 0)
    printf("world %d: all-reduce %.2f GB/s (2 (W - 1) / W of the buffer), %.1f us a call\n", c->world, rate[0] / 1e9,
           rate[1] * 1e6);
  c->ops->close(c);
  return 0;
}
