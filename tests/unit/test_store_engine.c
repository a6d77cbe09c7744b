// The engine through the store: eng_save / eng_load stream the training
// state shard by shard through RocksDB and a resumed run is bit-identical;
// boundary activations spilled to the store (ENG_PLACE_STORE) give the same
// losses as keeping them on the device; a checkpoint exported to a Hugging
// Face directory opens as a model with the same weights, and a Hugging Face
// directory imported into the store loads back into a run.
#define _XOPEN_SOURCE 700
#include <string.h>

#include "storage/store.h"
#include "tiny.h"
#include "unit/tmpdir.h"

enum { STEPS = 12, SAVE_AT = 6, KEEP = 2 };

static eng_err e;

// Saves every 2 steps up to SAVE_AT.
static int every_2(int step) { return step % 2 == 0 && step <= SAVE_AT; }

// Trains steps [from, to) recording losses; saves every 2 steps through
// `save` when given; resumes from `load` when given.
static void train(const eng_spec *s, double *loss, int from, int to, const eng_store *save, const eng_store *load) {
  tiny_train(s, loss, from, to, save, every_2, load);
}

static void check_same_weights(eng_run *a, eng_run *b, const char *what) {
  const char *names[] = {"model.embed_tokens.weight", "model.layers.1.mlp.down_proj.weight",
                         "model.layers.0.self_attn.q_norm.weight", "lm_head.weight"};
  for (int i = 0; i < 4; i++) {
    static float x[1 << 16], y[1 << 16];
    size_t numel = 0;
    const eng_config *c = eng_run_config(a);
    if (i == 0 || i == 3) numel = (size_t)c->vocab * c->d_model;
    if (i == 1) numel = (size_t)c->d_model * c->d_ff;
    if (i == 2) numel = (size_t)c->head_dim;
    CHECK_OK(eng_debug_param(a, names[i], 'w', x, numel, &e), &e);
    CHECK_OK(eng_debug_param(b, names[i], 'w', y, numel, &e), &e);
    CHECK(!memcmp(x, y, numel * sizeof(float)), "%s: %s differs", what, names[i]);
  }
}

int main(void) {
  tmp_make();
  store *st;
  CHECK_OK(store_open(&st, tmp_path("db"), NULL, &e), &e);
  eng_store es;
  CHECK_OK(store_engine_open(&es, st, "tiny", KEEP, &e), &e);
  eng_spec s;
  tiny_spec(&s, 2);
  s.total_steps = STEPS;
  s.micro_batches = 2;

  double a[STEPS], b[STEPS], c[STEPS];
  train(&s, a, 0, STEPS, &es, NULL);
  int64_t steps[8];
  int n;
  CHECK_OK(store_ckpt_list(st, "tiny", steps, 8, &n, &e), &e);
  CHECK(n == KEEP && steps[0] == SAVE_AT - 2 && steps[1] == SAVE_AT, "keep-last-%d after saves at 2, 4, 6: "
        "%d left", KEEP, n);
  int shards;
  CHECK_OK(store_ckpt_verify(st, "tiny", SAVE_AT, &shards, &e), &e);
  train(&s, b, SAVE_AT, STEPS, NULL, &es);
  for (int i = SAVE_AT; i < STEPS; i++)
    CHECK(b[i] == a[i], "step %d after resume: %.17g vs %.17g", i + 1, b[i], a[i]);
  printf("resume through RocksDB at step %d (%d shards verified): steps %d..%d bit-identical\n", SAVE_AT, shards,
         SAVE_AT + 1, STEPS);

  eng_spec sp = s;
  sp.ckpt_place = ENG_PLACE_STORE;
  sp.spill = &es;
  train(&sp, c, 0, STEPS, NULL, NULL);
  for (int i = 0; i < STEPS; i++) CHECK(c[i] == a[i], "step %d with spill: %.17g vs %.17g", i + 1, c[i], a[i]);
  store_usage u;
  CHECK_OK(store_usage_get(st, &u, &e), &e);
  CHECK(u.disk[STORE_CF_ACT] == 0, "every step's spill was dropped (%llu bytes left)",
        (unsigned long long)u.disk[STORE_CF_ACT]);
  printf("boundaries spilled to the store: %d steps bit-identical to the device placement\n", STEPS);

  // Export the checkpoint at step 6; the directory opens as the same model.
  const char *hf = tmp_path("hf");
  CHECK_OK(store_ckpt_export_hf(st, "tiny", -1, &s.config, hf, 0, 0, NULL, NULL, &e), &e);
  eng_run *r, *x;
  CHECK_OK(eng_open(&s, &r, &e), &e);
  CHECK_OK(eng_load(r, &es, &e), &e);
  eng_spec hs = s;
  hs.model_dir = hf;
  CHECK_OK(eng_open(&hs, &x, &e), &e);
  check_same_weights(r, x, "exported checkpoint");
  eng_config wrong = s.config;
  wrong.d_ff += 16;
  CHECK(store_ckpt_export_hf(st, "tiny", -1, &wrong, tmp_path("bad"), 0, 0, NULL, NULL, &e) == ENG_EINVAL &&
        strstr(e.msg, "differ"), "an export config of another shape is refused: %s", e.msg);
  eng_close(x);

  // Import it back as another job; it loads into a run opened from the directory.
  CHECK_OK(store_ckpt_import_hf(st, "imported", hf, &e), &e);
  eng_store is;
  CHECK_OK(store_engine_open(&is, st, "imported", 0, &e), &e);
  CHECK_OK(eng_open(&hs, &x, &e), &e);
  CHECK_OK(eng_load(x, &is, &e), &e);
  CHECK(eng_steps_done(x) == 0, "an imported model starts at step 0");
  check_same_weights(r, x, "imported model");
  eng_close(x);
  eng_close(r);
  is.close(is.ctx);
  printf("export to %s and import back: weights bit-identical\n", "a Hugging Face directory");

  // An adapter prunes to its keep when it opens: a run killed between a
  // commit and the keep that follows must not leave the extra to pile up.
  eng_store k1;
  CHECK_OK(store_engine_open(&k1, st, "tiny", 1, &e), &e);
  CHECK_OK(store_ckpt_list(st, "tiny", steps, 8, &n, &e), &e);
  CHECK(n == 1 && steps[0] == SAVE_AT, "opening with keep 1 left %d checkpoints", n);
  k1.close(k1.ctx);
  printf("opening with keep 1 pruned to the newest checkpoint (step %d)\n", SAVE_AT);

  es.close(es.ctx);
  store_close(st);
  tmp_cleanup();
  return 0;
}
