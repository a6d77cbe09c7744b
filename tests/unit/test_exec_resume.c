// Determinism and resume: the same seed gives bit-identical losses over 50
// steps; saving at step 20 and resuming in a new run gives bit-identical
// losses for steps 21 to 50 — with 8-bit and fp32 AdamW, with updates inline
// or on the optimizer thread, with lagged clipping, and computing from a bf16
// working copy (work_bf16, whose losses stay within 1% of the fp32 weights'
// while not their bits). Checkpoints of the
// previous format version load where the layer layout is unchanged.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "route.h"
#include "tiny.h"

// The default optimizer gets the full check; the other modes a shorter one
// (the suite also runs under the sanitizers).
enum { STEPS = 50, SAVE_AT = 20, MODE_STEPS = 16, MODE_SAVE_AT = 6 };

static int save_step_now; // the step train() saves after
static int is_save_step(int step) { return step == save_step_now; }

static void train(eng_spec *s, double *loss, int from, int to, int save_step, eng_store *save_at, eng_store *load) {
  save_step_now = save_step;
  tiny_train(s, loss, from, to, save_at, is_save_step, load);
}

// One optimizer mode: two runs of `steps` from the same seed, then a resume
// at save_step.
static void check_mode(const char *name, const eng_spec *s, int steps, int save_step, double *a) {
  double b[STEPS], c[STEPS];
  char dir[] = "/tmp/traind-resume-XXXXXX";
  CHECK(mkdtemp(dir), "mkdtemp failed");
  eng_err e = {0};
  eng_store st;
  CHECK_OK(eng_store_dir_open(&st, dir, &e), &e);
  eng_spec sp = *s;
  train(&sp, a, 0, steps, save_step, &st, NULL);
  train(&sp, b, 0, steps, 0, NULL, NULL);
  CHECK(!memcmp(a, b, sizeof(double) * (size_t)steps), "%s: two runs from the same seed differ", name);
  train(&sp, c, save_step, steps, 0, NULL, &st);
  for (int i = save_step; i < steps; i++)
    CHECK(c[i] == a[i], "%s: step %d after resume: %.17g vs %.17g", name, i + 1, c[i], a[i]);
  printf("%-28s %d steps bit-identical (loss %.4f -> %.4f); resumed at %d: steps %d..%d bit-identical\n", name,
         steps, a[0], a[steps - 1], save_step, save_step + 1, steps);
  st.close(st.ctx);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK(system(cmd) == 0, "cleanup failed");
}

// A store that hands out its checkpoints' "meta" as an older traind wrote it
// (format version 2: the q/k/v biases sat between the weights in a layer).
typedef struct v2_store {
  eng_store inner;
} v2_store;

static int v2_latest(void *ctx, int64_t *step, eng_err *e) {
  v2_store *v = ctx;
  return v->inner.ckpt_latest(v->inner.ctx, step, e);
}

static int v2_size(void *ctx, int64_t step, const char *name, size_t *n, eng_err *e) {
  v2_store *v = ctx;
  return v->inner.ckpt_size(v->inner.ctx, step, name, n, e);
}

static int v2_get(void *ctx, int64_t step, const char *name, void *data, size_t n, eng_err *e) {
  v2_store *v = ctx;
  int rc = v->inner.ckpt_get(v->inner.ctx, step, name, data, n, e);
  if (!rc && !strcmp(name, "meta")) ((int64_t *)data)[1] = 2; // the version field
  return rc;
}

// Version 2 checkpoints load where the layer layout did not change (no q/k/v
// biases) and are refused by name where it did (qwen2).
static void check_v2(const eng_spec *s, eng_arch arch, int loads) {
  char dir[] = "/tmp/traind-resume-v2-XXXXXX";
  CHECK(mkdtemp(dir), "mkdtemp failed");
  eng_err e = {0};
  eng_spec sp = *s;
  sp.config.arch = arch;
  sp.config.qkv_bias = arch == ENG_ARCH_QWEN2;
  sp.config.qk_norm = arch == ENG_ARCH_QWEN3;
  v2_store v;
  CHECK_OK(eng_store_dir_open(&v.inner, dir, &e), &e);
  double loss[2];
  train(&sp, loss, 0, 2, 2, &v.inner, NULL);
  // Only what loading reads: the newest step, the shards and their sizes.
  eng_store old = {.ctx = &v, .ckpt_latest = v2_latest, .ckpt_size = v2_size, .ckpt_get = v2_get};
  eng_run *r;
  CHECK_OK(eng_open(&sp, &r, &e), &e);
  int rc = eng_load(r, &old, &e);
  if (loads) {
    CHECK(rc == 0 && eng_steps_done(r) == 2, "%s: a version 2 checkpoint did not load: %s", eng_arch_name(arch), e.msg);
  } else {
    CHECK(rc != 0 && strstr(e.msg, "qwen2 layer layout"), "%s: a version 2 checkpoint was not refused (rc %d: %s)",
          eng_arch_name(arch), rc, e.msg);
  }
  printf("format version 2 checkpoint, %-6s %s\n", eng_arch_name(arch), loads ? "loads" : "refused by name");
  eng_close(r);
  v.inner.close(v.inner.ctx);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK(system(cmd) == 0, "cleanup failed");
}

int main(void) {
  test_route_announce();
  eng_spec s;
  tiny_spec(&s, 2);
  s.total_steps = STEPS;
  s.micro_batches = 2;
  double q8[STEPS], f32[STEPS], lag[STEPS], lag_thread[STEPS], thread[STEPS];
  check_mode("adamw8, bf16 gradients", &s, STEPS, SAVE_AT, q8);

  eng_spec f = s;
  f.optimizer = ENG_OPT_ADAMW;
  f.grad_dtype = ENG_GRAD_F32;
  check_mode("adamw (fp32), fp32 gradients", &f, MODE_STEPS, MODE_SAVE_AT, f32);

  // Updates on their own thread (the GPU arrangement) give the same bits.
  eng_spec t = s;
  t.opt_thread = 1;
  check_mode("adamw8, optimizer thread", &t, MODE_STEPS, MODE_SAVE_AT, thread);
  CHECK(!memcmp(thread, q8, sizeof(double) * MODE_STEPS), "updates on the optimizer thread change the losses");

  // Lagged clipping: a different trajectory (the factor lags a step), the
  // same whether updates start during the backward (optimizer thread) or not.
  eng_spec l = s;
  l.clip = 0.5f; // so that clipping is active
  l.clip_lagged = 1;
  check_mode("adamw8, lagged clip", &l, MODE_STEPS, MODE_SAVE_AT, lag);
  l.opt_thread = 1;
  check_mode("adamw8, lagged clip, thread", &l, MODE_STEPS, MODE_SAVE_AT, lag_thread);
  CHECK(!memcmp(lag, lag_thread, sizeof(double) * MODE_STEPS), "lagged updates during the backward change the losses");
  CHECK(lag[MODE_STEPS - 1] < 0.8 * lag[0], "lagged clipping did not train (%.4f -> %.4f)", lag[0],
        lag[MODE_STEPS - 1]);
  printf("optimizer thread = inline; lagged clip during the backward = after it\n");

  // A bf16 working copy: the same training within the rounding of the weights.
  eng_spec w = s;
  w.work_bf16 = 1;
  double work[STEPS];
  check_mode("adamw8, bf16 working copy", &w, MODE_STEPS, MODE_SAVE_AT, work);
  double worst = 0;
  for (int i = 0; i < MODE_STEPS; i++) {
    double rel = fabs(work[i] - q8[i]) / q8[i];
    worst = rel > worst ? rel : worst;
  }
  CHECK(worst < 1e-2 && memcmp(work, q8, sizeof(double) * MODE_STEPS),
        "a bf16 working copy: losses %.2e relative from the fp32 weights' (want below 1e-2, and not their bits)", worst);
  printf("a bf16 working copy: losses within %.2e relative of the fp32 weights'\n", worst);
  check_v2(&s, ENG_ARCH_QWEN3, 1);
  check_v2(&s, ENG_ARCH_LLAMA, 1);
  check_v2(&s, ENG_ARCH_QWEN2, 0);
  return 0;
}
