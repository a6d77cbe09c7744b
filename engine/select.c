// Data selection in a run (compute/select.h): the offline band, the online
// pool drawn and scored each step, the reference model, and the scores of a
// whole data file.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "run.h"

// Mean loss of each sequence of one batch (NAN: no counted token), by a
// forward of r's model; its model and executed FLOPs added to *fm, *fx.
// pos: the batch's positions, NULL unless it is packed.
static int score_batch(eng_run *r, const int32_t *ids, const int32_t *labels, const int32_t *pos, double *mean,
                       double *fm, double *fx, eng_err *e) {
  const int B = r->spec.batch, T = r->spec.seq_len;
  eng_exec_result res;
  int rc = eng_exec_score(r->exec, ids, labels, pos, mean, r->spec.cancel, &res, e);
  if (rc) return rc;
  for (int b = 0; b < B; b++) {
    int n = 0;
    for (int t = 1; t < T; t++) n += labels[(size_t)b * T + t] >= 0;
    mean[b] = n ? mean[b] / n : NAN;
  }
  *fm += r->flops.model / 3.0;
  *fx += r->flops.fwd;
  return 0;
}

static int band_apply(eng_run *r, eng_err *e) {
  const eng_select *s = &r->spec.select;
  uint64_t n = eng_data_file_samples(r->train);
  float *loss;
  int rc = eng_scores_read(r->spec.fs, s->band_file, n, r->spec.seq_len, &loss, e);
  if (rc) return eng_err_prefix(e, "select.band_file: ");
  uint8_t *keep = malloc(n ? n : 1);
  if (!keep) {
    free(loss);
    return eng_err_set(e, ENG_ENOMEM, "select: cannot allocate the band of %llu samples", (unsigned long long)n);
  }
  eng_scores_band(loss, n, s->band_lo, s->band_hi, keep);
  rc = eng_data_keep(r->train, keep, e);
  free(keep);
  free(loss);
  return rc ? eng_err_prefix(e, "select.band: ") : 0;
}

int eng_run_select_open(eng_run *r, eng_err *e) {
  const eng_select *s = &r->spec.select;
  int rc = 0;
  if (s->band_file && (rc = band_apply(r, e))) return rc;
  if (s->rule == ENG_SELECT_NONE) return 0;
  if (r->spec.device_gpu >= 0)
    return eng_err_set(e, ENG_ENOTSUP, "select.rule: online selection scores on the cpu backend in this build");
  if ((rc = eng_select_state_alloc(&r->sel, eng_data_file_samples(r->train), e))) return rc;
  const int k = s->pool ? s->pool : 4;
  const size_t bt = (size_t)r->spec.batch * r->spec.seq_len;
  r->pool_cap = k;
  r->pool_ids = malloc((size_t)k * bt * sizeof(int32_t));
  r->pool_labels = malloc((size_t)k * bt * sizeof(int32_t));
  r->pool_pos = malloc((size_t)k * bt * sizeof(int32_t));
  r->pool_samples = malloc((size_t)k * r->spec.batch * sizeof(uint64_t));
  r->pool_loss = malloc((size_t)k * r->spec.batch * sizeof(double));
  r->pool_pick = malloc((size_t)r->spec.batch * sizeof(int));
  if (!r->pool_ids || !r->pool_labels || !r->pool_pos || !r->pool_samples || !r->pool_loss || !r->pool_pick)
    return eng_err_set(e, ENG_ENOMEM, "select: cannot allocate a pool of %d batches", k);
  if (s->rule != ENG_SELECT_REDUCIBLE) return 0;
  eng_spec rs;
  eng_run_select_ref_spec(&r->spec, &rs);
  rs.peak_flops = r->peak > 0 ? r->peak : 0;
  if ((rc = eng_open(&rs, &r->ref, e))) return eng_err_prefix(e, "select.reference: ");
  if (eng_run_config(r->ref)->vocab != r->spec.config.vocab)
    return eng_err_set(e, ENG_EINVAL, "select.reference: its vocabulary has %d tokens, the model's %d",
                       eng_run_config(r->ref)->vocab, r->spec.config.vocab);
  return 0;
}

void eng_run_select_ref_spec(const eng_spec *s, eng_spec *rs) {
  eng_spec_defaults(rs);
  rs->model_dir = s->select.reference;
  rs->fs = s->fs;
  rs->seq_len = s->seq_len;
  rs->batch = s->batch;
  rs->device_cap = s->device_cap;
  rs->seed = s->seed;
}

void eng_run_select_close(eng_run *r) {
  eng_select_state_free(&r->sel);
  free(r->pool_ids);
  free(r->pool_labels);
  free(r->pool_pos);
  free(r->pool_samples);
  free(r->pool_loss);
  free(r->pool_pick);
  if (r->ref) eng_close(r->ref);
  r->ref = NULL;
}

// The pool's size in batches: the spec's, or with adaptive the ratio of the
// training set's tokens to those the remaining budget trains on.
static int pool_of(const eng_run *r) {
  const eng_select *s = &r->spec.select;
  const int k = s->pool ? s->pool : 4;
  if (!s->adaptive) return k;
  const eng_budget *b = &r->spec.budget;
  const eng_tally *t = &r->gov.t;
  double left = INFINITY, per_token = r->flops.model / ((double)r->spec.batch * r->spec.seq_len);
  if (b->max_tokens > 0) left = (double)(b->max_tokens - t->tokens);
  if (b->max_flops > 0) left = fmin(left, (b->max_flops - t->flops_model) / per_token);
  double ratio = (double)eng_data_samples(r->train) * r->spec.seq_len / fmax(left, 1.0);
  return ratio >= k ? k : ratio <= 1 ? 1 : (int)ceil(ratio);
}

// The reference model's losses of the pool's samples it has not scored
// yet, a batch at a time (the last filled up with repeats).
static int ref_scores(eng_run *r, int n, double *fm, double *fx, eng_err *e) {
  const int B = r->spec.batch, T = r->spec.seq_len;
  int *todo = malloc((size_t)n * sizeof *todo), m = 0, rc = 0;
  double *mean = malloc((size_t)B * sizeof *mean);
  if (!todo || !mean) rc = eng_err_set(e, ENG_ENOMEM, "select: cannot allocate the reference's scores");
  for (int i = 0; !rc && i < n; i++)
    if (isnan(r->sel.ref[r->pool_samples[i]])) todo[m++] = i;
  for (int i = 0; !rc && i < m; i += B) {
    for (int b = 0; b < B; b++) {
      int src = todo[i + b < m ? i + b : m - 1];
      memcpy(r->ids + (size_t)b * T, r->pool_ids + (size_t)src * T, (size_t)T * sizeof(int32_t));
      memcpy(r->labels + (size_t)b * T, r->pool_labels + (size_t)src * T, (size_t)T * sizeof(int32_t));
      memcpy(r->pos + (size_t)b * T, r->pool_pos + (size_t)src * T, (size_t)T * sizeof(int32_t));
    }
    if ((rc = score_batch(r->ref, r->ids, r->labels, eng_run_pos(r->train, r->pos), mean, fm, fx, e)))
      eng_err_prefix(e, "select.reference: ");
    for (int b = 0; !rc && b < B && i + b < m; b++) r->sel.ref[r->pool_samples[todo[i + b]]] = (float)mean[b];
  }
  free(todo);
  free(mean);
  return rc;
}

int eng_run_select_batch(eng_run *r, eng_err *e) {
  const int B = r->spec.batch, T = r->spec.seq_len, k = pool_of(r);
  const size_t bt = (size_t)B * T;
  double fm = 0, fx = 0;
  int rc = 0;
  if (k == 1) { // the budget covers the data: no selection
    r->score_model = r->score_exec = 0;
    return eng_data_next_samples(r->train, B, r->ids, r->labels, r->pos, NULL, e);
  }
  for (int g = 0; !rc && g < k; g++) {
    rc = eng_data_next_samples(r->train, B, r->pool_ids + g * bt, r->pool_labels + g * bt, r->pool_pos + g * bt,
                               r->pool_samples + g * B, e);
    if (!rc)
      rc = score_batch(r, r->pool_ids + g * bt, r->pool_labels + g * bt, eng_run_pos(r->train, r->pool_pos + g * bt),
                       r->pool_loss + g * B, &fm, &fx, e);
  }
  if (!rc && r->spec.select.rule == ENG_SELECT_REDUCIBLE) rc = ref_scores(r, k * B, &fm, &fx, e);
  if (rc) return rc;
  int *pick = r->pool_pick;
  eng_select_pick(r->spec.select.rule, &r->sel, r->pool_samples, r->pool_loss, k * B, B, pick);
  for (int b = 0; b < B; b++) {
    memcpy(r->ids + (size_t)b * T, r->pool_ids + (size_t)pick[b] * T, (size_t)T * sizeof(int32_t));
    memcpy(r->labels + (size_t)b * T, r->pool_labels + (size_t)pick[b] * T, (size_t)T * sizeof(int32_t));
    memcpy(r->pos + (size_t)b * T, r->pool_pos + (size_t)pick[b] * T, (size_t)T * sizeof(int32_t));
  }
  r->score_model = fm;
  r->score_exec = fx;
  return 0;
}

int eng_run_select_save(const eng_run *r, const eng_store *st, eng_err *e) {
  if (!r->sel.n) return 0;
  size_t n = eng_select_state_bytes(&r->sel);
  void *p = malloc(n);
  if (!p) return eng_err_set(e, ENG_ENOMEM, "cannot allocate %zu bytes for the selection state", n);
  eng_select_state_pack(&r->sel, p);
  int rc = st->ckpt_put(st->ctx, "select", p, n, e);
  free(p);
  return rc;
}

int eng_run_select_load(eng_run *r, const eng_store *st, int64_t step, eng_err *e) {
  if (!r->sel.n) return 0;
  size_t n;
  eng_err absent;
  if (st->ckpt_size(st->ctx, step, "select", &n, &absent))
    return eng_err_set(e, ENG_ESTATE, "checkpoint at step %lld has no selection state; this run selects its data "
                       "(select.rule %s): resume it with the rule it was saved with", (long long)step,
                       eng_select_rule_name(r->spec.select.rule));
  void *p = malloc(n ? n : 1);
  if (!p) return eng_err_set(e, ENG_ENOMEM, "cannot allocate %zu bytes for the selection state", n);
  int rc = st->ckpt_get(st->ctx, step, "select", p, n, e);
  if (!rc) rc = eng_select_state_unpack(&r->sel, p, n, e);
  free(p);
  if (rc) eng_err_prefix(e, "checkpoint at step %lld: ", (long long)step);
  return rc;
}

int eng_score_samples(eng_run *r, const char *data_path, float **out, uint64_t *count, double *flops, eng_err *e) {
  const int B = r->spec.batch;
  eng_data *d;
  int rc = eng_run_data_open(r, data_path, 0, &d, e);
  if (rc) return rc;
  uint64_t n = eng_data_file_samples(d);
  float *loss = malloc((n ? n : 1) * sizeof *loss);
  double *mean = malloc((size_t)B * sizeof *mean), fm = 0, fx = 0;
  if (!loss || !mean) rc = eng_err_set(e, ENG_ENOMEM, "cannot allocate the scores of %llu samples", (unsigned long long)n);
  // In file order, a batch at a time; the last batch wraps to the start
  // (those repeats are not kept).
  for (uint64_t i = 0; !rc && i < n; i += (uint64_t)B) {
    rc = eng_data_next_samples(d, B, r->ids, r->labels, r->pos, NULL, e);
    if (!rc) rc = score_batch(r, r->ids, r->labels, eng_run_pos(d, r->pos), mean, &fm, &fx, e);
    for (int b = 0; !rc && b < B && i + (uint64_t)b < n; b++) loss[i + (uint64_t)b] = (float)mean[b];
  }
  free(mean);
  eng_data_close(d);
  if (rc) {
    free(loss);
    return rc;
  }
  *out = loss;
  *count = n;
  if (flops) *flops = fm;
  return 0;
}

int eng_score_data(eng_run *r, const char *data_path, const char *out_path, double *flops, eng_err *e) {
  float *loss;
  uint64_t n;
  int rc = eng_score_samples(r, data_path, &loss, &n, flops, e);
  if (rc) return rc;
  rc = eng_scores_write(out_path, loss, n, r->spec.seq_len, e);
  free(loss);
  return rc;
}
