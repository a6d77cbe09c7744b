// Data-parallel training (engine/dist_run.c) in real MPI processes against
// single-process runs of the same global batches. Run without a launcher,
// this program trains the references itself, then starts itself under
// `mpirun -np 2` and `-np 4`; rank 0 of each writes its losses, which are
// compared here:
//   - batch 4 in 2 micro-batches, W = 2 (one micro-batch per rank): the 30
//     losses are bit-identical to the single process's;
//   - batch 4 in 4 micro-batches, W = 4 (one each): bit-identical;
//   - batch 4 in 4 micro-batches, W = 2 (two each): a rank sums its two
//     micro-batches before the ranks' sums are added, (g0 + g1) + (g2 + g3),
//     where the single process adds ((g0 + g1) + g2) + g3. The first loss
//     differs by an ulp (its sum is grouped so too), later ones by what
//     training makes of the rounding: with fp32 AdamW moments, all 30 within
//     1e-6 relative; with the default 8-bit moments the first 10 are, and
//     then the quantization amplifies it (a moment near a code's edge lands
//     in the next code), which is printed;
//   - batch 4 in 2 micro-batches, W = 2, a bf16 gradient store: each rank's
//     share is rounded to bf16 before the sum: the first loss (before any
//     update) matches, the rest within 1e-2 relative (1.3e-3 seen);
//   - with a bf16 working copy (work_bf16), where each rank holds the fp32
//     master of its part only and the working copy's parts are gathered:
//     W = 2 and W = 4, one micro-batch per rank, bit-identical to one
//     process with a working copy; the fp32 master gathered from the ranks'
//     parts for an export is one process's, byte for byte; and the fp32
//     master's and the optimizer state's bytes on a rank are 1/W of one
//     process's (within 10%).
// Identity holds because every weight gradient a micro-batch adds is one
// product added once (a micro-batch's 128 tokens are one pass of each
// gradient product; the embedding adds micro-batch sums,
// eng_k_embed_bwd_group) and the ranks add in rank order (dist/coll.h).
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dist/coll.h"
#include "dist/dist.h"
#include "launch.h"
#include "losses.h"
#include "route.h"
#include "tiny.h"

enum { STEPS = 30 };

// The runs: micro-batches, fp32 AdamW (else the default 8-bit moments), a
// bf16 gradient store (else fp32), a bf16 working copy.
static const struct {
  int micro, fp32, bf16, work;
} runs[] = {{2, 0, 0, 0}, {4, 0, 0, 0}, {4, 1, 0, 0}, {2, 0, 1, 0}, {2, 0, 0, 1}, {4, 0, 0, 1}};
enum { RUNS = sizeof runs / sizeof runs[0] };

static void spec_of(eng_spec *s, int k) {
  tiny_spec(s, 2);
  s->micro_batches = runs[k].micro;
  if (runs[k].fp32) s->optimizer = ENG_OPT_ADAMW;
  s->grad_dtype = runs[k].bf16 ? ENG_GRAD_BF16 : ENG_GRAD_F32;
  s->work_bf16 = runs[k].work;
  s->total_steps = STEPS;
}

// Trains spec s as tiny_train does and exports the model to dir (every
// rank takes part: the master may be in parts; rank 0 writes).
static void train_export(const eng_spec *s, double *loss, const char *dir) {
  eng_err e = {0};
  eng_run *r = tiny_train_open(s, loss, 0, STEPS, NULL, NULL, NULL);
  CHECK_OK(eng_export_hf(r, dir, 0, &e), &e);
  eng_close(r);
}

// Where run k at world size W exports.
static void export_dir(char *dir, size_t n, int W, int k) { snprintf(dir, n, "%s.%d.%d.hf", getenv("DIST_OUT"), W, k); }

// The fp32 master's and the optimizer state's bytes a run of spec s holds
// in this process.
static double state_bytes(const eng_spec *s) {
  eng_err e = {0};
  eng_run *r;
  CHECK_OK(eng_open(s, &r, &e), &e);
  double n = (double)eng_master_bytes(r) + (double)eng_opt_state_bytes(r);
  eng_close(r);
  return n;
}

// A rank: the runs its world size divides, rank 0's losses to $DIST_OUT.<W>.<run>.
static int rank_main(void) {
  eng_coll *c = dist_rank_open();
  for (int k = 0; k < RUNS; k++) {
    if (runs[k].micro < c->world) continue;
    eng_spec s;
    spec_of(&s, k);
    s.coll = c;
    double loss[STEPS];
    char dir[4200];
    export_dir(dir, sizeof dir, c->world, k);
    if (runs[k].work) train_export(&s, loss, dir);
    else tiny_train(&s, loss, 0, STEPS, NULL, NULL, NULL);
    if (c->rank == 0) {
      char path[4200];
      snprintf(path, sizeof path, "%s.%d.%d", getenv("DIST_OUT"), c->world, k);
      dist_losses_write(path, loss, STEPS);
      if (runs[k].work) { // what rank 0 holds
        double b = state_bytes(&s);
        snprintf(path, sizeof path, "%s.%d.%d.bytes", getenv("DIST_OUT"), c->world, k);
        dist_losses_write(path, &b, 1);
      }
    }
  }
  c->ops->close(c);
  return 0;
}

static void read_losses(int world, int k, double *loss) {
  char path[4200];
  snprintf(path, sizeof path, "%s.%d.%d", getenv("DIST_OUT"), world, k);
  dist_losses_read(path, loss, STEPS);
}

// Largest |a - b| / |b| over the first n steps, and how many differ in any bit.
static double compare(const double *a, const double *b, int n, int *differ) {
  double worst = 0;
  *differ = 0;
  for (int i = 0; i < n; i++) {
    *differ += memcmp(&a[i], &b[i], sizeof a[i]) != 0;
    double rel = fabs(a[i] - b[i]) / fabs(b[i]);
    if (rel > worst) worst = rel;
  }
  return worst;
}

int main(void) {
  eng_dist_env env;
  eng_err e = {0};
  CHECK_OK(eng_dist_env_read(&env, (const char *(*)(const char *))getenv, &e), &e);
  if (env.launcher != ENG_DIST_SINGLE) return rank_main();
  test_route_announce(); // the ranks inherit the route with the environment

  char out[] = "/tmp/test_dist_train.XXXXXX";
  CHECK(mkdtemp(out), "mkdtemp failed");
  char base[sizeof out + 8];
  snprintf(base, sizeof base, "%s/loss", out);
  setenv("DIST_OUT", base, 1);
  setenv("OMP_NUM_THREADS", "1", 1); // four ranks share two cores

  double ref[RUNS][STEPS];
  for (int k = 0; k < RUNS; k++) {
    eng_spec s;
    spec_of(&s, k);
    char dir[4200];
    export_dir(dir, sizeof dir, 1, k);
    if (runs[k].work) train_export(&s, ref[k], dir);
    else tiny_train(&s, ref[k], 0, STEPS, NULL, NULL, NULL);
  }
  CHECK(ref[0][STEPS - 1] < ref[0][0] - 0.5, "the reference did not learn (%.4f -> %.4f)", ref[0][0],
        ref[0][STEPS - 1]);
  for (int np = 2; np <= 4; np += 2) {
    int rc = dist_launch(np);
    CHECK(rc == 0, "mpirun -np %d exited %d (127: mpirun is missing; run deploy/install-deps.sh)", np, rc);
  }

  double got[STEPS];
  int differ;
  read_losses(2, 0, got);
  double rel = compare(got, ref[0], STEPS, &differ);
  CHECK(differ == 0, "W=2, 2 micro-batches: %d of %d losses differ from one process's (worst %.2e)", differ, STEPS,
        rel);
  printf("W=2, batch 4 in 2 micro-batches: %d losses bit-identical to one process (%.6f -> %.6f)\n", STEPS, got[0],
         got[STEPS - 1]);
  read_losses(4, 1, got);
  rel = compare(got, ref[1], STEPS, &differ);
  CHECK(differ == 0, "W=4, 4 micro-batches: %d of %d losses differ from one process's (worst %.2e)", differ, STEPS,
        rel);
  printf("W=4, batch 4 in 4 micro-batches: %d losses bit-identical to one process\n", STEPS);
  read_losses(2, 2, got);
  rel = compare(got, ref[2], STEPS, &differ);
  CHECK(rel <= 1e-6, "W=2, 4 micro-batches, fp32 AdamW: losses %.2e relative from one process's (limit 1e-6)", rel);
  printf("W=2, batch 4 in 4 micro-batches (two per rank, summed before the ranks), fp32 AdamW: %d of %d losses "
         "differ in their bits, by at most %.2e relative\n",
         differ, STEPS, rel);
  read_losses(2, 1, got);
  rel = compare(got, ref[1], 10, &differ);
  CHECK(rel <= 1e-6, "W=2, 4 micro-batches: the first 10 losses are %.2e relative from one process's (limit 1e-6)",
        rel);
  double all = compare(got, ref[1], STEPS, &differ);
  printf("  the same with 8-bit moments: %d of %d differ, the first 10 by at most %.2e relative, all by at most "
         "%.2e\n",
         differ, STEPS, rel, all);
  read_losses(2, 3, got);
  rel = compare(got, ref[3], STEPS, &differ);
  // The first loss precedes any update; later ones follow gradients rounded
  // to bf16 per rank and again after the sum (once in one process).
  CHECK(got[0] == ref[3][0] && rel <= 1e-2, "W=2, bf16 gradient store: the first loss %s, the worst %.2e relative "
        "(limit 1e-2)", got[0] == ref[3][0] ? "matches" : "differs", rel);
  printf("W=2, batch 4 in 2 micro-batches, bf16 gradient store: %d of %d losses differ, by at most %.2e relative\n",
         differ, STEPS, rel);
  // A bf16 working copy: the master in parts.
  for (int W = 2; W <= 4; W += 2) {
    const int k = W == 2 ? 4 : 5;
    read_losses(W, k, got);
    rel = compare(got, ref[k], STEPS, &differ);
    CHECK(differ == 0, "W=%d, bf16 working copy: %d of %d losses differ from one process's (worst %.2e)", W, differ,
          STEPS, rel);
    char one_dir[4200], dir[4200], cmd[9000];
    export_dir(one_dir, sizeof one_dir, 1, k);
    export_dir(dir, sizeof dir, W, k);
    snprintf(cmd, sizeof cmd, "cmp %s/model.safetensors %s/model.safetensors", one_dir, dir);
    CHECK(system(cmd) == 0, "W=%d, bf16 working copy: the exported fp32 weights differ from one process's", W);
    eng_spec s;
    spec_of(&s, k);
    double one = state_bytes(&s), b;
    char path[4200];
    snprintf(path, sizeof path, "%s.%d.%d.bytes", getenv("DIST_OUT"), W, k);
    dist_losses_read(path, &b, 1);
    double ratio = b / (one / W);
    CHECK(ratio >= 0.9 && ratio <= 1.1, "W=%d, bf16 working copy: a rank holds %.0f bytes of fp32 master and "
          "optimizer state, one process %.0f: %.3f of 1/W (limit 0.9..1.1)", W, b, one, ratio);
    printf("W=%d, bf16 working copy, batch 4 in %d micro-batches: %d losses bit-identical to one process, so is the "
           "exported fp32 master; fp32 master and optimizer state %.0f bytes on rank 0, one process %.0f (%.3f of 1/W)\n",
           W, runs[k].micro, STEPS, b, one, ratio);
  }
  char cmd[sizeof out + 16];
  snprintf(cmd, sizeof cmd, "rm -rf %s", out);
  CHECK(system(cmd) == 0, "cannot remove %s", out);
  printf("ok\n");
  return 0;
}
