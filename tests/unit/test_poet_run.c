// POET-X runs of the engine (method poetx) on the tests' tiny Qwen3 from
// scratch, block 16:
//   - from scratch every projection's W0 has rows of unit norm;
//   - two runs from one seed give the same losses to the bit, so does a run
//     in the memory mode (each chain's product recomputed), and runs
//     resumed from a checkpoint before a merge (step 9, merges every 6) and
//     right at one (step 12: its update and merge are pending when it is
//     saved) continue to the bit across the merges that follow;
//   - the loss falls;
//   - the spectrum: after 60 updates with a merge every 12, the singular
//     values of every exported (effective) projection equal those of the
//     first export within the bound the orthogonality errors give: each
//     rotation's singular values lie in [sqrt(1 - e), sqrt(1 + e)] for
//     e = |RᵀR - I|_F, so per merge σ moves by a factor within [1 - e, 1 + e]
//     (both sides, e the larger of the merge's errors, which the run
//     reports), compounding over the merges and the rotations in force at
//     the end (measured here from θ).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fixture.h"
#include "poet/poet.h"
#include "route.h"
#include "tiny.h"

// Short enough for the sanitizer build, which runs this test too.
enum { B = 16, RESUME_STEPS = 20, MERGE_EVERY = 6, SPECTRUM_STEPS = 61, SPECTRUM_MERGE = 12 };

static const char *const proj[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                   "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};

void dgesvd_(const char *jobu, const char *jobvt, const int *m, const int *n, double *a, const int *lda, double *s,
             double *u, const int *ldu, double *vt, const int *ldvt, double *work, const int *lwork, int *info);

static void poet_spec(eng_spec *s, int merge_every) {
  tiny_spec(s, 2);
  s->method = ENG_METHOD_POETX;
  s->poet_block = B;
  s->poet_merge_every = merge_every;
  s->poet_lr = 2e-3f;
}

static int save_step_now; // the step train() saves after
static int is_save_step(int step) { return step == save_step_now; }

static void train(const eng_spec *s, double *loss, int from, int to, int save_step, eng_store *save_at,
                  eng_store *load) {
  save_step_now = save_step;
  tiny_train(s, loss, from, to, save_at, is_save_step, load);
}

static void rmdir_r(const char *dir) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK(system(cmd) == 0, "cleanup of %s failed", dir);
}

static void check_resume(void) {
  eng_spec s;
  poet_spec(&s, MERGE_EVERY);
  double a[RESUME_STEPS], b[RESUME_STEPS], c[RESUME_STEPS];
  const int saves[] = {9, 12}; // before a merge, and with one pending
  for (int k = 0; k < 2; k++) {
    char dir[] = "/tmp/traind-poet-XXXXXX";
    CHECK(mkdtemp(dir), "mkdtemp");
    eng_err e = {0};
    eng_store st;
    CHECK_OK(eng_store_dir_open(&st, dir, &e), &e);
    train(&s, a, 0, RESUME_STEPS, saves[k], &st, NULL);
    if (k == 0) {
      train(&s, b, 0, RESUME_STEPS, 0, NULL, NULL);
      CHECK(!memcmp(a, b, sizeof a), "two POET-X runs from one seed differ");
      eng_spec sm = s;
      sm.poet_memory = 1;
      train(&sm, b, 0, RESUME_STEPS, 0, NULL, NULL);
      CHECK(!memcmp(a, b, sizeof a), "the memory mode's losses differ from the fast mode's");
      CHECK(a[RESUME_STEPS - 1] < a[0] - 0.3, "the loss fell only from %.4f to %.4f", a[0], a[RESUME_STEPS - 1]);
    }
    train(&s, c, saves[k], RESUME_STEPS, 0, NULL, &st);
    for (int i = saves[k]; i < RESUME_STEPS; i++)
      CHECK(c[i] == a[i], "resumed at %d: step %d: %.17g vs %.17g", saves[k], i + 1, c[i], a[i]);
    printf("resumed at step %d (merges every %d): steps %d..%d bit-identical (loss %.4f -> %.4f)\n", saves[k],
           MERGE_EVERY, saves[k] + 1, RESUME_STEPS, a[0], a[RESUME_STEPS - 1]);
    st.close(st.ctx);
    rmdir_r(dir);
  }
}

// Singular values of an exported projection (descending), in double.
static int svd_of(const char *dir, const char *name, double *sv) {
  char path[1200];
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  eng_st_file f;
  eng_err e = {0};
  CHECK_OK(eng_st_open(&f, NULL, path, &e), &e);
  const eng_st_tensor *t = eng_st_find(&f, name);
  CHECK(t && t->ndim == 2, "%s: no matrix %s", path, name);
  int m = (int)t->shape[0], n = (int)t->shape[1], one = 1, lwork = 4096, info = 0;
  float *w = malloc(t->numel * sizeof(float));
  CHECK_OK(eng_st_read_f32(&f, t, w, &e), &e);
  double *a = malloc(t->numel * sizeof(double)), work[4096], none = 0;
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) a[(size_t)j * m + i] = w[(size_t)i * n + j]; // column-major
  dgesvd_("N", "N", &m, &n, a, &m, sv, &none, &one, &none, &one, work, &lwork, &info);
  CHECK(info == 0, "dgesvd: %d", info);
  free(w), free(a);
  eng_st_close(&f);
  return m < n ? m : n;
}

static void check_spectrum(void) {
  eng_spec s;
  poet_spec(&s, SPECTRUM_MERGE);
  eng_err e = {0};
  eng_run *r;
  CHECK_OK(eng_open(&s, &r, &e), &e);
  // From scratch, W0's rows have unit norm.
  const eng_config cfg = *eng_run_config(r), *c = &cfg;
  float *w = malloc(sizeof(float) * c->d_ff * c->d_model);
  CHECK_OK(eng_debug_param(r, "model.layers.1.mlp.gate_proj.weight", 'w', w, (size_t)c->d_ff * c->d_model, &e), &e);
  for (int i = 0; i < c->d_ff; i++) {
    double sum = 0;
    for (int j = 0; j < c->d_model; j++) sum += (double)w[(size_t)i * c->d_model + j] * w[(size_t)i * c->d_model + j];
    CHECK(fabs(sum - 1) < 1e-5, "row %d of W0 has squared norm %.8f", i, sum);
  }
  free(w);
  char d0[] = "/tmp/traind-poet-spec0-XXXXXX", d1[] = "/tmp/traind-poet-spec1-XXXXXX";
  CHECK(mkdtemp(d0) && mkdtemp(d1), "mkdtemp");
  CHECK_OK(eng_export_hf(r, d0, 0, &e), &e);
  double up = 1, down = 1, first = 0, last = 0;
  int64_t seen = 0;
  for (int i = 0; i < SPECTRUM_STEPS; i++) {
    eng_metrics m;
    CHECK_OK(eng_step(r, &m, &e), &e);
    if (i == 0) first = m.loss;
    last = m.loss;
    if (m.poet_merges > seen) { // the merge after update SPECTRUM_MERGE·k applied during this step
      CHECK(m.poet_merges == seen + 1 && m.step == SPECTRUM_MERGE * m.poet_merges + 1, "merge %lld reported at step %lld",
            (long long)m.poet_merges, (long long)m.step);
      seen = m.poet_merges;
      up *= 1 + m.poet_orth_err;
      down *= 1 - m.poet_orth_err;
      printf("merge %lld (after update %lld): orthogonality error %.3e\n", (long long)seen, (long long)seen * SPECTRUM_MERGE,
             m.poet_orth_err);
    }
  }
  CHECK(seen == 5, "%lld merges in %d steps, every %d", (long long)seen, SPECTRUM_STEPS, SPECTRUM_MERGE);
  // The rotations in force at the end (the updates since the last merge).
  float *th = malloc(sizeof(float) * 64 * 8 * eng_poet_tri(B)), *rot = malloc(sizeof(float) * 256 * B);
  float cw[2 * B * B];
  double end_err = 0;
  for (int l = 0; l < c->n_layers; l++)
    for (int k = 0; k < 7; k++)
      for (int side = 0; side < 2; side++) {
        char name[160];
        snprintf(name, sizeof name, "model.layers.%d.%s.%s", l, proj[k], side ? "theta_out" : "theta_in");
        int dim = side ? (k == 4 || k == 5 ? c->d_ff : k == 1 || k == 2 ? c->n_kv_heads * c->head_dim : c->d_model)
                       : (k == 6 ? c->d_ff : k == 3 ? c->n_heads * c->head_dim : c->d_model);
        size_t n = (size_t)(dim / B) * eng_poet_tri(B);
        CHECK_OK(eng_debug_param(r, name, 'w', th, n, &e), &e);
        eng_poet_cayley(dim / B, B, th, rot, cw);
        double err = eng_poet_orth_err(dim / B, B, rot);
        if (err > end_err) end_err = err;
      }
  up *= 1 + end_err;
  down *= 1 - end_err;
  CHECK_OK(eng_export_hf(r, d1, 0, &e), &e);
  eng_close(r);
  CHECK(last < first - 0.5, "the loss fell only from %.4f to %.4f", first, last);

  double worst = 0, slack = 1e-5; // fp32 products
  for (int l = 0; l < c->n_layers; l++)
    for (int k = 0; k < 7; k++) {
      char name[160];
      snprintf(name, sizeof name, "model.layers.%d.%s.weight", l, proj[k]);
      double s0[256], s1[256];
      int n = svd_of(d0, name, s0);
      CHECK(svd_of(d1, name, s1) == n, "%s changed shape", name);
      for (int i = 0; i < n; i++) {
        double ratio = s1[i] / s0[i];
        worst = fmax(worst, fabs(ratio - 1));
        CHECK(ratio <= up * (1 + slack) && ratio >= down * (1 - slack),
              "%s: σ_%d moved by a factor %.8f, outside [%.8f, %.8f]", name, i, ratio, down, up);
      }
    }
  printf("loss %.4f -> %.4f; singular values of 14 projections: largest relative change %.3e, the bound "
         "[%.3e, %.3e] (5 merges, end error %.3e)\n", first, last, worst, down - 1, up - 1, end_err);
  free(th), free(rot);
  rmdir_r(d0);
  rmdir_r(d1);
}

int main(void) {
  test_route_announce();
  check_resume();
  check_spectrum();
  printf("ok\n");
  return 0;
}
