// A data-parallel checkpoint resumed at other world sizes (issue 19): run
// without a launcher, this program trains single-process references, then
// starts itself under `mpirun -np 2`, whose ranks train 10 steps and save
// (each holds part of the optimizer state; rank 0 writes it whole), then resumes that
// checkpoint at W = 1 here and at W = 4 under `mpirun -np 4`. Each resumed
// run's losses for steps 11..20 must match an uninterrupted run at its own
// world size within 1e-6 relative (they differ from it only in how the first
// 10 steps' micro-batch sums were grouped: two per rank at W = 2, one at
// W = 4, four at W = 1). fp32 AdamW moments: 8-bit moments amplify such
// last-bit differences (test_dist_train.c). All of it twice: with the fp32
// weights whole on every rank, and with a bf16 working copy (work_bf16),
// where each rank holds the fp32 master of its part only, which a save
// gathers and a load cuts again.
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
#include "store.h"
#include "tiny.h"

enum { STEPS = 20, HALF = 10 };

static void spec_of(eng_spec *s) {
  tiny_spec(s, 2);
  s->work_bf16 = getenv("DIST_WORK") && !strcmp(getenv("DIST_WORK"), "1");
  s->micro_batches = 4;
  s->grad_dtype = ENG_GRAD_F32;
  s->optimizer = ENG_OPT_ADAMW;
  s->total_steps = STEPS;
}

static int at_half(int step) { return step == HALF; }

static void store_open(eng_store *st) {
  eng_err e = {0};
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/ckpt%s", getenv("DIST_DIR"), getenv("DIST_WORK"));
  CHECK_OK(eng_store_dir_open(st, dir, &e), &e);
}

static void write_losses(const char *name, const double *loss) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", getenv("DIST_DIR"), name);
  dist_losses_write(path, loss, STEPS);
}

static void read_losses(const char *name, double *loss) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", getenv("DIST_DIR"), name);
  dist_losses_read(path, loss, STEPS);
}

// DIST_MODE save (W = 2): 10 steps, saved. resume (W = 4): 20 steps
// uninterrupted, and the checkpoint resumed for steps 11..20.
static int rank_main(void) {
  eng_coll *c = dist_rank_open();
  eng_spec s;
  spec_of(&s);
  s.coll = c;
  double full[STEPS] = {0}, part[STEPS] = {0};
  eng_store st = {0};
  if (!strcmp(getenv("DIST_MODE"), "save")) {
    store_open(&st); // every rank saves (the optimizer state is in parts); rank 0 writes
    tiny_train(&s, full, 0, HALF, &st, at_half, NULL);
  } else {
    tiny_train(&s, full, 0, STEPS, NULL, NULL, NULL);
    store_open(&st);
    tiny_train(&s, part, HALF, STEPS, NULL, NULL, &st);
    if (c->rank == 0) write_losses("full", full), write_losses("part", part);
  }
  if (st.close) st.close(st.ctx);
  c->ops->close(c);
  return 0;
}

static double worst(const double *a, const double *b) {
  double w = 0;
  for (int i = HALF; i < STEPS; i++) {
    double r = fabs(a[i] - b[i]) / fabs(b[i]);
    if (r > w) w = r;
  }
  return w;
}

// The checks for one way of holding the weights (DIST_WORK: "1", a bf16
// working copy; "0", the fp32 weights).
static void resume_check(const char *work) {
  setenv("DIST_WORK", work, 1);
  printf("%s:\n", work[0] == '1' ? "bf16 working copy, fp32 master in parts" : "fp32 weights whole");
  eng_spec s;
  spec_of(&s);
  double ref1[STEPS], got[STEPS] = {0};
  tiny_train(&s, ref1, 0, STEPS, NULL, NULL, NULL);

  setenv("DIST_MODE", "save", 1);
  CHECK(dist_launch(2) == 0, "mpirun -np 2 (train and save) failed");
  eng_store st;
  store_open(&st);
  tiny_train(&s, got, HALF, STEPS, NULL, NULL, &st);
  st.close(st.ctx);
  double w1 = worst(got, ref1);
  CHECK(w1 <= 1e-6, "the W=2 checkpoint resumed at W=1: steps 11..20 are %.2e relative from an uninterrupted W=1 run",
        w1);
  printf("  a W=2 checkpoint (step 10) resumed at W=1: steps 11..20 within %.2e relative of an uninterrupted W=1 run "
         "(loss %.6f at step 20)\n",
         w1, got[STEPS - 1]);

  setenv("DIST_MODE", "resume", 1);
  CHECK(dist_launch(4) == 0, "mpirun -np 4 (resume) failed");
  double full[STEPS], part[STEPS];
  read_losses("full", full);
  read_losses("part", part);
  double w4 = worst(part, full);
  CHECK(w4 <= 1e-6, "the W=2 checkpoint resumed at W=4: steps 11..20 are %.2e relative from an uninterrupted W=4 run",
        w4);
  printf("  the same checkpoint resumed at W=4: within %.2e relative of an uninterrupted W=4 run\n", w4);
}

int main(void) {
  eng_dist_env env;
  eng_err e = {0};
  CHECK_OK(eng_dist_env_read(&env, (const char *(*)(const char *))getenv, &e), &e);
  if (env.launcher != ENG_DIST_SINGLE) return rank_main();

  char dir[] = "/tmp/test_dist_resume.XXXXXX";
  CHECK(mkdtemp(dir), "mkdtemp failed");
  setenv("DIST_DIR", dir, 1);
  setenv("OMP_NUM_THREADS", "1", 1); // four ranks share two cores
  resume_check("0");
  resume_check("1");
  char cmd[sizeof dir + 16];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK(system(cmd) == 0, "cannot remove %s", dir);
  printf("ok\n");
  return 0;
}
