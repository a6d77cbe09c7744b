// Data selection (compute/select.h, engine/select.c):
//  - a percentile band keeps the samples whose scores lie in it, and a data
//    set restricted to them serves exactly those, each once an epoch;
//  - a scores file round-trips, and one of other data is refused by name;
//  - each rule ranks a pool as it says (loss; loss less the reference's;
//    unseen first, then the largest fall since last scored);
//  - a run that selects spends a forward's third of a step's model FLOPs per
//    scored batch against its budget, and saved and resumed it takes the
//    same steps with the same bits as an uninterrupted run;
//  - eng_score_data scores every sample of a file as the training scores do.
#define _XOPEN_SOURCE 700
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "compute/flops.h"
#include "data/data.h"
#include "tiny.h"
#include "tmpdir.h"

static void test_band(void) {
  float loss[10] = {5, 1, 9, 3, 7, NAN, 2, 8, 4, 6};
  uint8_t keep[10];
  uint64_t n = eng_scores_band(loss, 10, 25, 75, keep);
  // Nine finite scores 1..9: ranks [2, 7) of them, the values 3..7.
  for (int i = 0; i < 10; i++)
    CHECK(keep[i] == (isfinite(loss[i]) && loss[i] >= 3 && loss[i] <= 7), "sample %d (score %g) kept %d", i, loss[i],
          keep[i]);
  CHECK(n == 5, "kept %llu", (unsigned long long)n);

  eng_err e = {0};
  const char *path = tmp_path("scores.txt");
  CHECK_OK(eng_scores_write(path, loss, 10, 64, &e), &e);
  float *back;
  CHECK_OK(eng_scores_read(NULL, path, 10, 64, &back, &e), &e);
  for (int i = 0; i < 10; i++)
    CHECK(back[i] == loss[i] || (isnan(back[i]) && isnan(loss[i])), "score %d: %g back as %g", i, loss[i], back[i]);
  free(back);
  CHECK(eng_scores_read(NULL, path, 11, 64, &back, &e) == ENG_EINVAL && strstr(e.msg, "10 samples of 64"), "got: %s",
        e.msg);

  // A data set restricted to the kept samples serves each of them once an
  // epoch, nothing else.
  eng_data *d;
  CHECK_OK(eng_data_open(&d, NULL, TRAIND_SOURCE_DIR "/data/demo/licenses.txt", 64, 256, 1, 1, &e), &e);
  uint64_t N = eng_data_file_samples(d);
  uint8_t *k = calloc(N, 1);
  for (uint64_t i = 0; i < N; i += 3) k[i] = 1;
  CHECK_OK(eng_data_keep(d, k, &e), &e);
  uint64_t kept = (N + 2) / 3, seen = 0;
  CHECK(eng_data_samples(d) == kept, "serves %llu of %llu", (unsigned long long)eng_data_samples(d),
        (unsigned long long)kept);
  uint8_t *hit = calloc(N, 1);
  int32_t ids[64], labels[64];
  for (uint64_t i = 0; i < kept; i++) {
    uint64_t s;
    CHECK_OK(eng_data_next_samples(d, 1, ids, labels, NULL, &s, &e), &e);
    CHECK(s < N && k[s] && !hit[s], "sample %llu served (kept %d, seen before %d)", (unsigned long long)s, k[s], hit[s]);
    hit[s] = 1;
    seen++;
  }
  eng_data_pos p;
  eng_data_pos_get(d, &p);
  CHECK(seen == kept && p.epoch == 1 && p.index == 0, "an epoch of the band: %llu samples, then (%llu, %llu)",
        (unsigned long long)seen, (unsigned long long)p.epoch, (unsigned long long)p.index);
  memset(k, 0, N);
  CHECK(eng_data_keep(d, k, &e) == ENG_EINVAL && strstr(e.msg, "keeps none"), "got: %s", e.msg);
  free(k);
  free(hit);
  eng_data_close(d);
  printf("band: percentiles 25-75 of 9 scores keep 5; a band of %llu samples is served once an epoch\n",
         (unsigned long long)kept);
}

static void test_pick(void) {
  eng_select_state st;
  eng_err e = {0};
  CHECK_OK(eng_select_state_alloc(&st, 8, &e), &e);
  const uint64_t samples[6] = {0, 1, 2, 3, 4, 5};
  const double cur[6] = {2.0, 5.0, 3.0, 1.0, 4.0, 3.0};
  int pick[3];
  eng_select_pick(ENG_SELECT_LOSS, &st, samples, cur, 6, 3, pick);
  CHECK(pick[0] == 1 && pick[1] == 2 && pick[2] == 4, "loss picked %d %d %d", pick[0], pick[1], pick[2]);
  // Reducible: 5-4.5, 4-0 and 3-1 lead.
  const float ref[6] = {1.0f, 4.5f, 1.0f, 0.5f, 0.0f, 2.9f};
  for (int i = 0; i < 6; i++) st.ref[i] = ref[i];
  eng_select_pick(ENG_SELECT_REDUCIBLE, &st, samples, cur, 6, 3, pick);
  CHECK(pick[0] == 0 && pick[1] == 2 && pick[2] == 4, "reducible picked %d %d %d", pick[0], pick[1], pick[2]);
  // Dynamics: 0, 1, 2 seen before (at 2.5, 5.1, 4.0; 2 fell most), 3, 4,
  // 5 not: the unseen first by loss (4 at 4.0, then 5 at 3.0); all six
  // recorded.
  st.last[0] = 2.5f, st.last[1] = 5.1f, st.last[2] = 4.0f;
  eng_select_pick(ENG_SELECT_DYNAMICS, &st, samples, cur, 6, 2, pick);
  CHECK(pick[0] == 4 && pick[1] == 5, "dynamics picked %d %d", pick[0], pick[1]);
  for (int i = 0; i < 6; i++) CHECK(st.last[i] == (float)cur[i], "sample %d's last loss %g", i, st.last[i]);
  // Then all seen: the largest falls (2 from 3 to 1.5: 1.5; 1 from 5 to 4: 1).
  const double next[6] = {2.0, 4.0, 1.5, 1.0, 4.0, 3.5};
  eng_select_pick(ENG_SELECT_DYNAMICS, &st, samples, next, 6, 2, pick);
  CHECK(pick[0] == 1 && pick[1] == 2, "dynamics, all seen, picked %d %d", pick[0], pick[1]);
  size_t n = eng_select_state_bytes(&st);
  void *p = malloc(n);
  eng_select_state_pack(&st, p);
  eng_select_state back;
  CHECK_OK(eng_select_state_alloc(&back, 8, &e), &e);
  CHECK_OK(eng_select_state_unpack(&back, p, n, &e), &e);
  CHECK(!memcmp(back.last, st.last, 8 * sizeof(float)) && !memcmp(back.ref, st.ref, 6 * sizeof(float)),
        "the state does not round-trip");
  eng_select_state_free(&back);
  CHECK_OK(eng_select_state_alloc(&back, 9, &e), &e);
  CHECK(eng_select_state_unpack(&back, p, n, &e) == ENG_EINVAL && strstr(e.msg, "holds 8 samples"), "got: %s", e.msg);
  eng_select_state_free(&back);
  eng_select_state_free(&st);
  free(p);
  printf("pick: loss, reducible and dynamics rank a pool as documented; the state round-trips\n");
}

typedef struct trace {
  double loss[64];
  eng_tally t;
  int steps;
} trace;

// Trains s until its end or budget; saves after step save_at through save,
// or resumes from load.
static void run(const eng_spec *s, trace *tr, int save_at, eng_store *save, eng_store *load) {
  eng_err e = {0};
  eng_run *r;
  CHECK_OK(eng_open(s, &r, &e), &e);
  if (load) CHECK_OK(eng_load(r, load, &e), &e);
  while (eng_steps_done(r) < s->total_steps && !eng_run_govern(r)->stop) {
    eng_metrics m;
    CHECK_OK(eng_step(r, &m, &e), &e);
    tr->loss[m.step - 1] = m.loss;
    if (save && m.step == save_at) CHECK_OK(eng_save(r, save, &e), &e);
  }
  tr->steps = (int)eng_steps_done(r);
  tr->t = eng_run_govern(r)->t;
  eng_close(r);
}

static void test_run(void) {
  eng_spec s;
  tiny_spec(&s, 2);
  s.total_steps = 40;
  eng_step_flops f;
  eng_err e = {0};
  CHECK_OK(eng_flops_step(&s.config, s.batch, s.seq_len, 0, 0, &f, &e), &e);
  // Pool of 3: a step costs its own model FLOPs and three forwards.
  s.select = (eng_select){.rule = ENG_SELECT_DYNAMICS, .pool = 3};
  s.budget.max_flops = 10.5 * 2 * f.model;
  trace a, b, c;
  eng_store st;
  CHECK_OK(eng_store_dir_open(&st, tmp_path("ckpt"), &e), &e);
  run(&s, &a, 4, &st, NULL);
  CHECK(a.steps == 10 && fabs(a.t.flops_model - 10 * 2 * f.model) < 1e-6 * a.t.flops_model,
        "dynamics, pool 3: %d steps, %.6g model FLOPs; each step costs %.6g", a.steps, a.t.flops_model, 2 * f.model);
  run(&s, &b, 0, NULL, NULL);
  CHECK(b.steps == a.steps && !memcmp(a.loss, b.loss, sizeof(double) * (size_t)a.steps), "two runs differ");
  run(&s, &c, 0, NULL, &st);
  for (int i = 4; i < a.steps; i++)
    CHECK(c.loss[i] == a.loss[i], "resumed at 4: step %d's loss %.17g, uninterrupted %.17g", i + 1, c.loss[i],
          a.loss[i]);
  CHECK(c.steps == a.steps && c.t.flops_model == a.t.flops_model && c.t.tokens == a.t.tokens,
        "resumed: %d steps, %.17g FLOPs; uninterrupted %d, %.17g", c.steps, c.t.flops_model, a.steps, a.t.flops_model);
  st.close(st.ctx);

  // A different selection is a different trajectory from the same seed.
  eng_spec n = s;
  n.select = (eng_select){0};
  trace d;
  run(&n, &d, 0, NULL, NULL);
  CHECK(d.steps == 21 && memcmp(d.loss, a.loss, sizeof(double) * 10),
        "without selection: %d steps (the budget buys 21), losses as with it", d.steps);
  printf("run: dynamics with a pool of 3 takes %d steps of a budget that buys %d without; resumed bit-identical\n",
         a.steps, d.steps);

  // eng_score_data: every sample of the file, as a training pool scores it.
  eng_spec q;
  tiny_spec(&q, 2);
  eng_run *r;
  CHECK_OK(eng_open(&q, &r, &e), &e);
  double fl;
  const char *out = tmp_path("train-scores.txt");
  CHECK_OK(eng_score_data(r, q.train_path, out, &fl, &e), &e);
  eng_data *dd;
  CHECK_OK(eng_data_open(&dd, NULL, q.train_path, q.seq_len, 256, 1, 0, &e), &e);
  uint64_t N = eng_data_file_samples(dd);
  eng_data_close(dd);
  float *sc;
  CHECK_OK(eng_scores_read(NULL, out, N, q.seq_len, &sc, &e), &e);
  for (uint64_t i = 0; i < N; i++) CHECK(sc[i] > 4 && sc[i] < 7, "an untrained byte model scores sample %llu %g",
                                         (unsigned long long)i, sc[i]);
  double want = ceil((double)N / q.batch) * f.model / 3;
  CHECK(fabs(fl - want) < 1e-6 * want, "scoring %llu samples: %.6g model FLOPs, expected %.6g", (unsigned long long)N,
        fl, want);
  free(sc);
  eng_close(r);
  printf("score: %llu samples scored, %.4g model FLOPs\n", (unsigned long long)N, fl);

  // Host memory counts the reducible rule's reference model, a run of its own.
  eng_spec h;
  tiny_spec(&h, 2);
  CHECK_OK(eng_open(&h, &r, &e), &e);
  const char *refdir = tmp_path("ref");
  CHECK_OK(eng_export_hf(r, refdir, 0, &e), &e);
  eng_close(r);
  size_t plain, with, ref;
  CHECK_OK(eng_spec_host_bytes(&h, &plain, &e), &e);
  h.select = (eng_select){.rule = ENG_SELECT_REDUCIBLE, .pool = 2, .reference = refdir};
  CHECK_OK(eng_spec_host_bytes(&h, &with, &e), &e);
  eng_spec rs = h;
  rs.select = (eng_select){0};
  rs.model_dir = refdir;
  CHECK_OK(eng_spec_host_bytes(&rs, &ref, &e), &e);
  CHECK(with > plain + ref, "host bytes: %zu plain, %zu with a reference of %zu", plain, with, ref);
  printf("host bytes: %zu, with a reference model %zu\n", plain, with);

  // Refusals, by field.
  eng_spec bad = s;
  bad.select = (eng_select){.rule = ENG_SELECT_REDUCIBLE, .pool = 2};
  CHECK(eng_open(&bad, &r, &e) == ENG_EINVAL && strstr(e.msg, "select.reference"), "got: %s", e.msg);
  bad.select = (eng_select){.rule = ENG_SELECT_LOSS, .pool = 1};
  CHECK(eng_open(&bad, &r, &e) == ENG_EINVAL && strstr(e.msg, "select.pool"), "got: %s", e.msg);
  bad = n;
  bad.budget = (eng_budget){0};
  bad.select = (eng_select){.rule = ENG_SELECT_LOSS, .adaptive = 1};
  CHECK(eng_open(&bad, &r, &e) == ENG_EINVAL && strstr(e.msg, "select.adaptive"), "got: %s", e.msg);
}

int main(void) {
  tmp_make();
  test_band();
  test_pick();
  test_run();
  tmp_cleanup();
  printf("test_select: ok\n");
  return 0;
}
