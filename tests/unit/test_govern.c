// Compute accounting and governance (compute/flops.h, compute/govern.h):
//  - a step's model FLOPs are PaLM's 6N + 12·L·H·Q·T per token, counted here
//    from the config by hand; executed FLOPs add one layer forward per
//    sequence for every layer the policy recomputes;
//  - each budget (tokens, model FLOPs, wall time) stops a real run within
//    one step, and a run saved and resumed stops where an uninterrupted one
//    does, with the same tally;
//  - the marginal-gain rule stops a run whose held-out loss plateaus (a
//    sentence the model has learnt) and leaves one that keeps improving (held-out
//    licence text) alone; GL_α fires on a rise; the curve is in each failure.
#define _XOPEN_SOURCE 700
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "compute/flops.h"
#include "tiny.h"
#include "tmpdir.h"

static void test_flops(void) {
  eng_spec s;
  tiny_spec(&s, 2);
  const eng_config *c = &s.config;
  const double d = c->d_model, q = (double)c->n_heads * c->head_dim, kv = (double)c->n_kv_heads * c->head_dim;
  const double layer = d * q + 2 * d * kv + q * d + 3 * d * c->d_ff; // q, k, v, o, gate, up, down
  const double N = c->n_layers * layer + (double)c->vocab * d;        // and the head
  const double tokens = (double)s.batch * s.seq_len;
  const double want = tokens * (6 * N + 12.0 * c->n_layers * c->n_heads * c->head_dim * s.seq_len);
  eng_step_flops f;
  eng_err e = {0};
  CHECK_OK(eng_flops_step(c, s.batch, s.seq_len, 0, 0, &f, &e), &e);
  CHECK(fabs(f.model - want) <= 1e-9 * want, "model FLOPs %.6g, by hand %.6g", f.model, want);
  CHECK(f.exec > 0.9 * f.model && f.exec < 1.1 * f.model, "executed %.6g vs model %.6g", f.exec, f.model);

  // The policy's recompute shows in executed FLOPs, never in model FLOPs:
  // every layer keeping its activations recomputes nothing; without them each
  // layer's inside runs again; with only the first boundary kept, layer 0's
  // forward runs once more as well.
  struct {
    int keep, ckpt_every, refwd;
  } pol[] = {{1, 1, 0}, {0, 1, 2}, {0, 0, 3}};
  for (int i = 0; i < 3; i++) {
    eng_spec p = s;
    p.keep_acts = pol[i].keep;
    p.ckpt_every = pol[i].ckpt_every;
    eng_run *r;
    CHECK_OK(eng_open(&p, &r, &e), &e);
    eng_metrics m;
    CHECK_OK(eng_step(r, &m, &e), &e);
    double exec = f.exec + pol[i].refwd * s.batch * f.refwd;
    CHECK(m.flops_model == f.model, "policy %d: model FLOPs %.6g, expected %.6g", i, m.flops_model, f.model);
    CHECK(fabs(m.flops_exec - exec) <= 1e-9 * exec, "policy %d: executed %.6g, expected %.6g", i, m.flops_exec, exec);
    CHECK(m.total.tokens == (int64_t)tokens && m.counted > 0 && m.counted <= m.tokens && m.mfu > 0 && m.mfu < 1,
          "policy %d: tokens %lld, counted %lld, MFU %g", i, (long long)m.total.tokens, (long long)m.counted, m.mfu);
    eng_close(r);
  }
  printf("flops: %.4g model, %.4g executed per step; recompute counted per policy\n", f.model, f.exec);
}

// Runs s to its end or its budget; returns the steps taken, the tally in *t,
// the largest wall time of a step in *step_wall.
static int run_budget(const eng_spec *s, eng_store *save, int save_at, eng_store *load, eng_tally *t,
                      eng_stop *why, double *step_wall) {
  eng_err e = {0};
  eng_run *r;
  CHECK_OK(eng_open(s, &r, &e), &e);
  if (load) CHECK_OK(eng_load(r, load, &e), &e);
  double prev = eng_run_govern(r)->t.wall_s;
  *step_wall = 0;
  while (eng_steps_done(r) < s->total_steps && !eng_run_govern(r)->stop) {
    eng_metrics m;
    CHECK_OK(eng_step(r, &m, &e), &e);
    if (m.total.wall_s - prev > *step_wall) *step_wall = m.total.wall_s - prev;
    prev = m.total.wall_s;
    if (save && eng_steps_done(r) == save_at) CHECK_OK(eng_save(r, save, &e), &e);
  }
  int steps = (int)eng_steps_done(r);
  *t = eng_run_govern(r)->t;
  *why = eng_run_govern(r)->stop;
  eng_close(r);
  return steps;
}

static void test_budgets(void) {
  eng_spec s;
  tiny_spec(&s, 2);
  s.total_steps = 200;
  const int64_t per = (int64_t)s.batch * s.seq_len;
  eng_step_flops f;
  eng_err e = {0};
  CHECK_OK(eng_flops_step(&s.config, s.batch, s.seq_len, 0, 0, &f, &e), &e);
  eng_tally t;
  eng_stop why;
  double sw;

  eng_spec b = s;
  b.budget.max_tokens = 7 * per + per / 2;
  int n = run_budget(&b, NULL, 0, NULL, &t, &why, &sw);
  CHECK(why == ENG_STOP_TOKENS && n == 7 && t.tokens == 7 * per, "max_tokens %lld: stopped by \"%s\" after %d steps, "
        "%lld tokens", (long long)b.budget.max_tokens, eng_stop_name(why), n, (long long)t.tokens);

  b = s;
  b.budget.max_flops = 9.5 * f.model;
  n = run_budget(&b, NULL, 0, NULL, &t, &why, &sw);
  CHECK(why == ENG_STOP_FLOPS && n == 9 && t.flops_model <= b.budget.max_flops &&
        t.flops_model + f.model > b.budget.max_flops,
        "max_flops %.4g: stopped by \"%s\" after %d steps, %.4g FLOPs", b.budget.max_flops, eng_stop_name(why), n,
        t.flops_model);
  printf("budgets: max_tokens stopped after %d steps (%lld tokens), ", 7, (long long)7 * per);
  printf("max_flops after %d steps (%.4g of %.4g)\n", n, t.flops_model, b.budget.max_flops);

  // Wall time: the run ends after the step that leaves less than another
  // step's time, so it neither passes the budget by more than a step nor
  // stops more than a step short of it.
  b = s;
  b.total_steps = 1000000;
  b.budget.max_wall_s = 0.4;
  n = run_budget(&b, NULL, 0, NULL, &t, &why, &sw);
  CHECK(why == ENG_STOP_WALL && t.wall_s <= b.budget.max_wall_s + sw && t.wall_s + sw > b.budget.max_wall_s,
        "max_wall 0.4 s: stopped by \"%s\" after %d steps, %.3f s, longest step %.3f s", eng_stop_name(why), n,
        t.wall_s, sw);
  printf("budgets: max_wall %.1f s stopped after %d steps at %.3f s (longest step %.4f s)\n", b.budget.max_wall_s, n,
         t.wall_s, sw);

  // Saved at step 4 and resumed, the run spends against the same budget.
  eng_store st;
  CHECK_OK(eng_store_dir_open(&st, tmp_path("resume"), &e), &e);
  b = s;
  b.budget.max_flops = 9.5 * f.model;
  eng_tally t1, t2;
  run_budget(&b, &st, 4, NULL, &t1, &why, &sw);
  n = run_budget(&b, NULL, 0, &st, &t2, &why, &sw);
  CHECK(why == ENG_STOP_FLOPS && n == 9 && t2.steps == t1.steps && t2.tokens == t1.tokens &&
        t2.counted == t1.counted && t2.flops_model == t1.flops_model && t2.flops_exec == t1.flops_exec,
        "resumed at 4: stopped by \"%s\" after %d steps, %lld tokens (%lld counted), %.17g FLOPs; uninterrupted: "
        "%lld tokens (%lld counted), %.17g FLOPs", eng_stop_name(why), n, (long long)t2.tokens,
        (long long)t2.counted, t2.flops_model, (long long)t1.tokens, (long long)t1.counted, t1.flops_model);
  st.close(st.ctx);
  printf("budgets: resumed at step 4, stopped at step %d with the uninterrupted run's tally\n", n);

  // Budgets a single step passes are refused by name.
  b = s;
  b.budget.max_tokens = per - 1;
  eng_run *r;
  CHECK(eng_open(&b, &r, &e) == ENG_EINVAL && strstr(e.msg, "budget.max_tokens"), "got: %s", e.msg);
  b = s;
  b.budget.gain_tau = 1e-12;
  CHECK(eng_open(&b, &r, &e) == ENG_EINVAL && strstr(e.msg, "budget.gain_tau") && strstr(e.msg, "held-out"),
        "got: %s", e.msg);
}

// The curve a rule decided on, for a failure message.
static const char *curve(const eng_govern *g) {
  static char buf[8192];
  size_t n = 0;
  buf[0] = 0;
  for (int i = 0; i < g->n_evals && n < sizeof buf - 64; i++)
    n += (size_t)snprintf(buf + n, sizeof buf - n, "%s(step %lld, %.3g FLOPs, %.4f)", i ? " " : "",
                          (long long)g->evals[i].step, g->evals[i].flops, g->evals[i].loss);
  snprintf(buf + n, sizeof buf - n, "; last fit %.4f %+.4f ln F, gain %.3g per FLOP", g->fit_a, g->fit_b, g->gain);
  return buf;
}

// Trains until the end or a rule; returns the steps taken.
static int run_rule(const eng_spec *s, eng_govern *out) {
  eng_err e = {0};
  eng_run *r;
  CHECK_OK(eng_open(s, &r, &e), &e);
  while (eng_steps_done(r) < s->total_steps && !eng_run_govern(r)->stop) CHECK_OK(eng_step(r, NULL, &e), &e);
  int steps = (int)eng_steps_done(r);
  const eng_govern *g = eng_run_govern(r);
  void *p;
  size_t n;
  CHECK_OK(eng_govern_pack(g, &p, &n, &e), &e); // a copy that outlives the run, through the checkpoint format
  eng_govern_init(out, &s->budget);
  CHECK_OK(eng_govern_unpack(out, p, n, &e), &e);
  free(p);
  eng_close(r);
  return steps;
}

static void write_file(const char *path, const char *text, int times) {
  FILE *f = fopen(path, "w");
  CHECK(f, "cannot write %s", path);
  for (int i = 0; i < times; i++) fputs(text, f);
  CHECK(fclose(f) == 0, "cannot write %s", path);
}

static void test_marginal_gain(void) {
  eng_spec s;
  tiny_spec(&s, 2);
  s.total_steps = 300;
  s.eval_every = 10;
  s.budget.gain_tau = 2e-13;
  eng_govern g;

  // Plateau: a sentence, learnt in about a hundred steps, after which its
  // held-out loss has nowhere to go.
  eng_spec p = s;
  write_file(tmp_path("sentence.txt"), "the cat sat on the mat. ", 800);
  p.train_path = p.eval_path = tmp_path("sentence.txt");
  int n = run_rule(&p, &g);
  CHECK(g.stop == ENG_STOP_GAIN && n < p.total_steps, "plateau: not stopped by the marginal gain rule (%d of %d steps, "
        "\"%s\"); curve: %s", n, p.total_steps, eng_stop_name(g.stop), curve(&g));
  printf("marginal gain: plateau stopped at step %d: %s\n", n, curve(&g));
  eng_govern_free(&g);

  // Improving: held-out licence text keeps getting better for 300 steps.
  FILE *f = fopen(s.train_path, "rb");
  CHECK(f, "cannot read %s", s.train_path);
  static char text[1 << 18];
  size_t len = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[len] = 0;
  size_t cut = len * 9 / 10;
  write_file(tmp_path("eval.txt"), text + cut, 1);
  text[cut] = 0;
  write_file(tmp_path("train.txt"), text, 1);
  eng_spec q = s;
  q.train_path = tmp_path("train.txt");
  q.eval_path = tmp_path("eval.txt");
  n = run_rule(&q, &g);
  CHECK(g.stop == ENG_STOP_NONE && n == q.total_steps, "improving: stopped by \"%s\" at step %d; curve: %s",
        eng_stop_name(g.stop), n, curve(&g));
  printf("marginal gain: improving run went on to step %d: %s\n", n, curve(&g));
  eng_govern_free(&g);
}

// The rules on given curves: GL_α on a rise; the fit on exact logarithms.
static void test_rules(void) {
  eng_budget b = {.gl_alpha = 5};
  eng_govern g;
  eng_err e = {0};
  eng_govern_init(&g, &b);
  const double loss[] = {3.0, 2.5, 2.4, 2.45, 2.6};
  int fired = -1;
  for (int i = 0; i < 5 && fired < 0; i++) {
    eng_govern_step(&g, 100, 100, 1e9, 1e9, 0.01);
    CHECK_OK(eng_govern_eval(&g, loss[i], &e), &e);
    if (g.stop) fired = i;
  }
  CHECK(fired == 4 && g.stop == ENG_STOP_GL && fabs(g.gl - 100 * (2.6 / 2.4 - 1)) < 1e-9,
        "GL 5%%: fired at evaluation %d (GL %.3f); curve: %s", fired, g.gl, curve(&g));
  eng_govern_free(&g);

  // loss = 5 − 0.5·ln F exactly: the fit finds it, the gain is 0.5 / F.
  b = (eng_budget){.gain_tau = 1e-20};
  eng_govern_init(&g, &b);
  for (int i = 0; i < 6; i++) {
    eng_govern_step(&g, 100, 100, 1e9, 0, 0.01);
    CHECK_OK(eng_govern_eval(&g, 5 - 0.5 * log(g.t.flops_model), &e), &e);
  }
  double F = g.t.flops_model;
  CHECK(fabs(g.fit_b + 0.5) < 1e-9 && fabs(g.gain - 0.5 / F) < 1e-9 * 0.5 / F && !g.stop,
        "fit %.6f %+.6f ln F, gain %.6g (want %.6g); curve: %s", g.fit_a, g.fit_b, g.gain, 0.5 / F, curve(&g));
  eng_govern_free(&g);

  // Budget fields are checked by name.
  b = (eng_budget){.gain_window = 2};
  CHECK(eng_budget_validate(&b, 1, &e) == ENG_EINVAL && strstr(e.msg, "budget.gain_window"), "got: %s", e.msg);
  b = (eng_budget){.max_flops = -1};
  CHECK(eng_budget_validate(&b, 1, &e) == ENG_EINVAL && strstr(e.msg, "budget.max_flops"), "got: %s", e.msg);
  char junk[sizeof(int64_t) * 20] = {0};
  eng_govern_init(&g, &b);
  CHECK(eng_govern_unpack(&g, junk, sizeof junk, &e) == ENG_EINVAL && strstr(e.msg, "corrupt"), "got: %s", e.msg);
  eng_govern_free(&g);
  printf("rules: GL fires on a %.1f%% rise; the fit recovers an exact log curve\n", 100 * (2.6 / 2.4 - 1));
}

int main(void) {
  tmp_make();
  test_flops();
  test_rules();
  test_budgets();
  test_marginal_gain();
  tmp_cleanup();
  printf("test_govern: ok\n");
  return 0;
}
