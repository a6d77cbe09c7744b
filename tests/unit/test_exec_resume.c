// Determinism and resume: the same seed gives bit-identical losses over 50
// steps; saving at step 20 and resuming in a new run gives bit-identical
// losses for steps 21 to 50.
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "tiny.h"

enum { STEPS = 50, SAVE_AT = 20 };

static void train(eng_spec *s, double *loss, int from, int to, eng_store *save_at, eng_store *load) {
  eng_err e = {0};
  eng_run *r;
  CHECK_OK(eng_open(s, &r, &e), &e);
  if (load) CHECK_OK(eng_load(r, load, &e), &e);
  CHECK(eng_steps_done(r) == from, "resumed at step %lld, expected %d", (long long)eng_steps_done(r), from);
  for (int i = from; i < to; i++) {
    eng_metrics m;
    CHECK_OK(eng_step(r, &m, &e), &e);
    loss[i] = m.loss;
    if (save_at && i + 1 == SAVE_AT) CHECK_OK(eng_save(r, save_at, &e), &e);
  }
  eng_close(r);
}

int main(void) {
  eng_spec s;
  tiny_spec(&s, 2);
  s.total_steps = STEPS;
  s.micro_batches = 2;
  double a[STEPS], b[STEPS], c[STEPS];
  char dir[] = "/tmp/traind-resume-XXXXXX";
  CHECK(mkdtemp(dir), "mkdtemp failed");
  eng_err e = {0};
  eng_store st;
  CHECK_OK(eng_store_dir_open(&st, dir, &e), &e);

  train(&s, a, 0, STEPS, &st, NULL);
  train(&s, b, 0, STEPS, NULL, NULL);
  CHECK(!memcmp(a, b, sizeof a), "two runs from the same seed differ");
  printf("50 steps, same seed: bit-identical (loss %.4f -> %.4f)\n", a[0], a[STEPS - 1]);

  train(&s, c, SAVE_AT, STEPS, NULL, &st);
  for (int i = SAVE_AT; i < STEPS; i++)
    CHECK(c[i] == a[i], "step %d after resume: %.17g vs %.17g", i + 1, c[i], a[i]);
  printf("resumed at step %d: steps %d..%d bit-identical\n", SAVE_AT, SAVE_AT + 1, STEPS);

  st.close(st.ctx);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK(system(cmd) == 0, "cleanup failed");
  return 0;
}
