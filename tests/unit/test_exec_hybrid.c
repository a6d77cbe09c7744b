// A hybrid model (Qwen3.5's shape: Gated DeltaNet layers, every third layer
// gated full attention, zero-centred norms, partial RoPE) trains through the
// layer-streaming executor on the cpu: the loss falls; the losses are
// bit-identical across checkpoint intervals (layers recomputed or kept),
// device caps that make the layers stream, the optimizer thread, and a
// resume from a checkpoint; two micro-batches give the same losses to 1e-6.
// A checkpoint of a hybrid of another shape is refused by name.
// Each layer kind is checked against transformers in test_hybrid_layers.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "route.h"
#include "tiny.h"

enum { LAYERS = 6, STEPS = 12, SAVE = 5 };

static void hybrid_spec(eng_spec *s) {
  tiny_spec(s, LAYERS);
  tiny_hybrid(&s->config, 3);
  s->seq_len = 96; // past one 64-token chunk of the delta rule
  s->batch = 4;
  s->ckpt_every = 1;
}

static int save_at(int step) { return step == SAVE; }

static void run(const char *what, const eng_spec *s, double *loss, const double *ref, double tol) {
  tiny_train(s, loss, 0, STEPS, NULL, NULL, NULL);
  if (ref)
    for (int i = 0; i < STEPS; i++)
      CHECK(tol ? fabs(loss[i] - ref[i]) <= tol * fabs(ref[i]) : loss[i] == ref[i],
            "%s: step %d loss %.17g vs %.17g", what, i + 1, loss[i], ref[i]);
  printf("%-34s loss %.5f -> %.5f%s\n", what, loss[0], loss[STEPS - 1], ref ? (tol ? " (within 1e-6)" : " (same bits)") : "");
}

int main(void) {
  test_route_announce();
  eng_spec base;
  hybrid_spec(&base);
  eng_err e = {0};
  double ref[STEPS], l[STEPS];
  run("ckpt_every 1", &base, ref, NULL, 0);
  CHECK(ref[STEPS - 1] < ref[0] - 0.5, "the loss did not fall: %.4f -> %.4f", ref[0], ref[STEPS - 1]);

  eng_spec s = base;
  s.ckpt_every = 0; // every layer's inside recomputed from the first boundary on
  run("ckpt_every 0", &s, l, ref, 0);
  s = base, s.keep_acts = 1;
  run("keep_acts", &s, l, ref, 0);
  s = base, s.opt_thread = 1;
  run("optimizer thread", &s, l, ref, 0);
  // A cap that holds a fraction of the model: the layers stream.
  size_t need;
  s = base;
  CHECK_OK(eng_spec_device_bytes(&s, &need, &e), &e);
  s.device_cap = need;
  run("device cap at the minimum", &s, l, ref, 0);
  s = base, s.micro_batches = 2;
  run("2 micro-batches", &s, l, ref, 1e-6);

  // Resume: a checkpoint after step SAVE, then steps SAVE+1.. from it.
  char dir[] = "/tmp/test_exec_hybrid.XXXXXX";
  CHECK(mkdtemp(dir), "mkdtemp");
  eng_store st;
  CHECK_OK(eng_store_dir_open(&st, dir, &e), &e);
  double a[STEPS], b[STEPS];
  tiny_train(&base, a, 0, STEPS, &st, save_at, NULL);
  CHECK(!memcmp(a, ref, sizeof a), "a run that saves differs");
  tiny_train(&base, b, SAVE, STEPS, NULL, NULL, &st);
  for (int i = SAVE; i < STEPS; i++) CHECK(b[i] == a[i], "resumed step %d: %.17g vs %.17g", i + 1, b[i], a[i]);
  printf("resumed at step %d: steps %d..%d bit-identical\n", SAVE, SAVE + 1, STEPS);
  // A hybrid of another shape that the meta's fields do not tell apart (as
  // many parameters, fewer rotated dims) is refused by name.
  eng_spec other = base;
  other.config.rope_dim = 4;
  eng_run *r;
  CHECK_OK(eng_open(&other, &r, &e), &e);
  CHECK(eng_load(r, &st, &e) == ENG_ESTATE && strstr(e.msg, "hybrid of another shape") && strstr(e.msg, "rotary dims"),
        "a checkpoint of another hybrid: %s", e.msg);
  printf("refused: %s\n", e.msg);
  eng_close(r);
  st.close(st.ctx);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK(system(cmd) == 0, "cleanup");
  printf("test_exec_hybrid: ok\n");
  return 0;
}
