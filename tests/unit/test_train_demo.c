// Learning: the tiny config trained from scratch on the demo text lowers
// its loss by at least 30% from the first step's, and the held-out loss
// falls too.
#include <math.h>

#include "check.h"
#include "tiny.h"

int main(void) {
  eng_spec s;
  tiny_spec(&s, 2);
  static char eval[1024];
  snprintf(eval, sizeof eval, "%s/data/demo/eval.txt", TRAIND_SOURCE_DIR);
  s.eval_path = eval;
  s.total_steps = 150;
  eng_err e = {0};
  eng_run *r;
  CHECK_OK(eng_open(&s, &r, &e), &e);
  double eval0;
  CHECK_OK(eng_eval(r, &eval0, &e), &e);
  double first = NAN, last = NAN;
  for (int i = 0; i < s.total_steps; i++) {
    eng_metrics m;
    CHECK_OK(eng_step(r, &m, &e), &e);
    if (i == 0) first = m.loss;
    last = m.loss;
    if (i % 25 == 0) printf("step %d loss %.4f\n", i, m.loss);
  }
  double eval1;
  CHECK_OK(eng_eval(r, &eval1, &e), &e);
  printf("loss %.4f -> %.4f (%.0f%%), held-out %.4f -> %.4f\n", first, last,
         100.0 * (first - last) / first, eval0, eval1);
  CHECK(last <= 0.7 * first, "loss fell from %.4f only to %.4f", first, last);
  CHECK(eval1 < eval0, "held-out loss did not fall (%.4f -> %.4f)", eval0, eval1);
  eng_close(r);
  return 0;
}
