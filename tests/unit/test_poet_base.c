// POET-X fine-tuning a loaded model, and its bf16 base (eng_spec
// poet_base_bf16), on the tiny Qwen3 whose weights are stored in bf16
// (tests/fixtures/qwen3_bf16), block 16, a merge every 4 updates:
//   - a POET-X run starts out computing the model it loaded: its first loss
//     is the full method's (the first permutations are the identity until
//     the first merge);
//   - with W0 already bf16 values, a bf16 base gives the fp32 base's losses
//     to the bit until the first merge rounds the new W0, and stays close
//     after it; both learn;
//   - a run with a bf16 base resumed from a checkpoint continues to the bit
//     across a merge;
//   - the base halves what the frozen weights take in host memory.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fixture.h"
#include "model/layout.h"
#include "poet/state.h"
#include "tiny.h"

enum { B = 16, STEPS = 12, MERGE_EVERY = 4, SAVE_AT = 6 };

static void spec_of(eng_spec *s, eng_method method, int base_bf16) {
  tiny_spec(s, 2);
  s->model_dir = fx_dir("qwen3_bf16");
  s->method = method;
  s->poet_block = B;
  s->poet_merge_every = MERGE_EVERY;
  s->poet_lr = 2e-3f;
  s->poet_base_bf16 = base_bf16;
}

static int save_when(int step) { return step == SAVE_AT; }

int main(void) {
  eng_spec full, f32, b16;
  spec_of(&full, ENG_METHOD_FULL, 0);
  spec_of(&f32, ENG_METHOD_POETX, 0);
  spec_of(&b16, ENG_METHOD_POETX, 1);

  double lf[STEPS], la[STEPS], lb[STEPS], lc[STEPS];
  tiny_train(&full, lf, 0, 1, NULL, NULL, NULL);
  tiny_train(&f32, la, 0, STEPS, NULL, NULL, NULL);
  CHECK(fabs(la[0] - lf[0]) <= 1e-6 * lf[0], "POET-X starts at loss %.9f, the loaded model's is %.9f", la[0], lf[0]);
  printf("first loss: full %.9f, POET-X %.9f\n", lf[0], la[0]);

  char dir[] = "/tmp/traind-poet-base-XXXXXX";
  CHECK(mkdtemp(dir), "mkdtemp");
  eng_err e = {0};
  eng_store st;
  CHECK_OK(eng_store_dir_open(&st, dir, &e), &e);
  tiny_train(&b16, lb, 0, STEPS, &st, save_when, NULL);
  for (int i = 0; i < MERGE_EVERY; i++)
    CHECK(lb[i] == la[i], "step %d before the first merge: bf16 base %.17g, fp32 base %.17g", i + 1, lb[i], la[i]);
  for (int i = MERGE_EVERY; i < STEPS; i++)
    CHECK(fabs(lb[i] - la[i]) < 2e-3 * la[i], "step %d: bf16 base %.6f, fp32 base %.6f", i + 1, lb[i], la[i]);
  CHECK(la[STEPS - 1] < la[0] - 0.2 && lb[STEPS - 1] < lb[0] - 0.2, "the losses fell only %.4f -> %.4f, %.4f -> %.4f",
        la[0], la[STEPS - 1], lb[0], lb[STEPS - 1]);
  printf("bf16 base: steps 1..%d bit-identical to the fp32 base, then within %.1e (loss %.4f -> %.4f vs %.4f)\n",
         MERGE_EVERY, 2e-3, lb[0], lb[STEPS - 1], la[STEPS - 1]);

  tiny_train(&b16, lc, SAVE_AT, STEPS, NULL, NULL, &st);
  for (int i = SAVE_AT; i < STEPS; i++)
    CHECK(lc[i] == lb[i], "bf16 base resumed at %d: step %d: %.17g vs %.17g", SAVE_AT, i + 1, lc[i], lb[i]);
  printf("bf16 base resumed at step %d: steps %d..%d bit-identical across the merge at %d\n", SAVE_AT, SAVE_AT + 1,
         STEPS, 2 * MERGE_EVERY);
  st.close(st.ctx);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK(system(cmd) == 0, "cleanup of %s failed", dir);

  // Host memory: 2 bytes less per frozen value (less the norms' slots,
  // which the base keeps unused: a few hundred bytes a layer).
  size_t h32, h16;
  CHECK_OK(eng_spec_host_bytes(&f32, &h32, &e), &e);
  CHECK_OK(eng_spec_host_bytes(&b16, &h16, &e), &e);
  eng_run *r;
  CHECK_OK(eng_open(&f32, &r, &e), &e);
  const eng_config cfg = *eng_run_config(r);
  eng_close(r);
  eng_layout lo;
  eng_layout_init(&lo, &cfg);
  double frozen = 0;
  for (int k = 0; k < ENG_POET_WEIGHTS; k++) frozen += (double)lo.layer_proto[eng_poet_param[k]].numel * lo.n_layers;
  double saved = (double)h32 - (double)h16;
  CHECK(saved <= 2 * frozen && saved >= 0.99 * 2 * frozen, "a bf16 base saves %.0f bytes, 2 x %.0f frozen values",
        saved, frozen);
  printf("host bytes: fp32 base %zu, bf16 base %zu (%.0f less, %.0f frozen values)\n", h32, h16, saved, frozen);
  return 0;
}
