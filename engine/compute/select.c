#include "compute/select.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const rule_names[] = {"none", "loss", "reducible", "dynamics"};

int eng_select_rule_parse(const char *name) {
  for (int i = 0; i < 4; i++)
    if (!strcmp(name, rule_names[i])) return i;
  return -1;
}

const char *eng_select_rule_name(eng_select_rule r) { return r >= 0 && r < 4 ? rule_names[r] : "?"; }

int eng_select_validate(const eng_select *s, int has_budget, eng_err *e) {
#define BAD(...) return eng_err_set(e, ENG_EINVAL, "select." __VA_ARGS__)
  if (s->rule < ENG_SELECT_NONE || s->rule > ENG_SELECT_DYNAMICS) BAD("rule: unknown rule %d", s->rule);
  if (s->pool < 0 || s->pool > 64) BAD("pool: must be in [0, 64] batches (0: 4), got %d", s->pool);
  if (s->rule != ENG_SELECT_NONE && s->pool == 1) BAD("pool: 1 batch selects nothing; at least 2");
  if (s->rule == ENG_SELECT_REDUCIBLE && !s->reference) BAD("reference: the reducible rule needs a reference model");
  if (s->rule != ENG_SELECT_REDUCIBLE && s->reference) BAD("reference: only the reducible rule uses one");
  if (s->adaptive && s->rule == ENG_SELECT_NONE) BAD("adaptive: needs a rule");
  if (s->adaptive && !has_budget) BAD("adaptive: needs a token or FLOP budget to adapt to");
  if (s->band_file && !(s->band_lo >= 0 && s->band_lo < s->band_hi && s->band_hi <= 100))
    BAD("band: percentiles must satisfy 0 <= lo < hi <= 100 (got %g, %g)", s->band_lo, s->band_hi);
#undef BAD
  return 0;
}

char *eng_scores_text(const float *loss, uint64_t n, int seq_len, size_t *len) {
  size_t cap = 64 + 16 * (size_t)n, k; // "%.9g\n" is at most 16 bytes
  char *t = malloc(cap);
  if (!t) return NULL;
  k = (size_t)snprintf(t, cap, "# traind scores v1 samples %llu seq_len %d\n", (unsigned long long)n, seq_len);
  for (uint64_t i = 0; i < n; i++) k += (size_t)snprintf(t + k, cap - k, "%.9g\n", loss[i]);
  *len = k;
  return t;
}

int eng_scores_write(const char *path, const float *loss, uint64_t n, int seq_len, eng_err *e) {
  size_t len;
  char *text = eng_scores_text(loss, n, seq_len, &len);
  if (!text) return eng_err_set(e, ENG_ENOMEM, "cannot format %llu scores", (unsigned long long)n);
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) {
    free(text);
    return eng_err_set(e, ENG_EIO, "%s: cannot write: %s", tmp, strerror(errno));
  }
  int bad = fwrite(text, 1, len, f) != len;
  free(text);
  bad |= fflush(f) | fsync(fileno(f));
  if (fclose(f) || bad || rename(tmp, path)) {
    unlink(tmp);
    return eng_err_set(e, ENG_EIO, "%s: cannot write the scores", path);
  }
  return 0;
}

int eng_scores_read(const eng_fs *fs, const char *path, uint64_t n, int seq_len, float **loss, eng_err *e) {
  int fd;
  int rc = eng_fs_open(fs, path, &fd, e);
  if (rc) return rc;
  FILE *f = fdopen(fd, "r");
  if (!f) {
    close(fd);
    return eng_err_set(e, ENG_EIO, "%s: cannot read", path);
  }
  unsigned long long fn;
  int ft;
  if (fscanf(f, "# traind scores v1 samples %llu seq_len %d", &fn, &ft) != 2) {
    fclose(f);
    return eng_err_set(e, ENG_EINVAL, "%s: line 1: not a traind scores file (\"# traind scores v1 ...\")", path);
  }
  if (fn != n || ft != seq_len) {
    fclose(f);
    return eng_err_set(e, ENG_EINVAL, "%s: scores %llu samples of %d tokens; the data has %llu of %d", path, fn, ft,
                       (unsigned long long)n, seq_len);
  }
  float *l = malloc((n ? n : 1) * sizeof *l);
  if (!l) {
    fclose(f);
    return eng_err_set(e, ENG_ENOMEM, "%s: cannot allocate %llu scores", path, fn);
  }
  for (uint64_t i = 0; i < n; i++) {
    char word[64];
    if (fscanf(f, "%63s", word) != 1) {
      free(l);
      fclose(f);
      return eng_err_set(e, ENG_EINVAL, "%s: line %llu: missing (the header says %llu scores)", path,
                         (unsigned long long)i + 2, fn);
    }
    char *end;
    l[i] = strtof(word, &end);
    if (*end) {
      free(l);
      fclose(f);
      return eng_err_set(e, ENG_EINVAL, "%s: line %llu: not a number", path, (unsigned long long)i + 2);
    }
  }
  fclose(f);
  *loss = l;
  return 0;
}

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

uint64_t eng_scores_band(const float *loss, uint64_t n, double lo, double hi, uint8_t *keep) {
  float *s = malloc((n ? n : 1) * sizeof *s);
  uint64_t m = 0;
  for (uint64_t i = 0; s && i < n; i++)
    if (isfinite(loss[i])) s[m++] = loss[i];
  memset(keep, 0, n);
  if (!s || !m) {
    free(s);
    return 0;
  }
  qsort(s, m, sizeof *s, cmp_float);
  // The band's edges as sample ranks: [lo% of m, hi% of m).
  uint64_t a = (uint64_t)floor(lo / 100.0 * (double)m), b = (uint64_t)ceil(hi / 100.0 * (double)m);
  float vlo = s[a < m ? a : m - 1], vhi = s[b > 0 ? b - 1 : 0];
  free(s);
  uint64_t k = 0;
  for (uint64_t i = 0; i < n; i++) k += keep[i] = isfinite(loss[i]) && loss[i] >= vlo && loss[i] <= vhi;
  return k;
}

int eng_select_state_alloc(eng_select_state *st, uint64_t n, eng_err *e) {
  st->n = n;
  st->last = malloc((n ? n : 1) * sizeof(float));
  st->ref = malloc((n ? n : 1) * sizeof(float));
  if (!st->last || !st->ref) {
    eng_select_state_free(st);
    return eng_err_set(e, ENG_ENOMEM, "cannot allocate the selection state of %llu samples", (unsigned long long)n);
  }
  for (uint64_t i = 0; i < n; i++) st->last[i] = st->ref[i] = NAN;
  return 0;
}

void eng_select_state_free(eng_select_state *st) {
  free(st->last);
  free(st->ref);
  st->last = st->ref = NULL;
  st->n = 0;
}

size_t eng_select_state_bytes(const eng_select_state *st) { return sizeof(uint64_t) + 2 * st->n * sizeof(float); }

void eng_select_state_pack(const eng_select_state *st, void *out) {
  unsigned char *p = out;
  memcpy(p, &st->n, sizeof st->n);
  memcpy(p + sizeof st->n, st->last, st->n * sizeof(float));
  memcpy(p + sizeof st->n + st->n * sizeof(float), st->ref, st->n * sizeof(float));
}

int eng_select_state_unpack(eng_select_state *st, const void *data, size_t n, eng_err *e) {
  uint64_t k;
  if (n < sizeof k) return eng_err_set(e, ENG_EINVAL, "the selection state is truncated");
  memcpy(&k, data, sizeof k);
  if (k != st->n || n != eng_select_state_bytes(st))
    return eng_err_set(e, ENG_EINVAL, "the selection state holds %llu samples, the data has %llu",
                       (unsigned long long)k, (unsigned long long)st->n);
  const unsigned char *p = data;
  memcpy(st->last, p + sizeof k, k * sizeof(float));
  memcpy(st->ref, p + sizeof k + k * sizeof(float), k * sizeof(float));
  return 0;
}

typedef struct ranked {
  int tier;     // dynamics: 1 for a sample never scored, which comes first
  double score;
  int at;
} ranked;

static int by_score(const void *a, const void *b) {
  const ranked *x = a, *y = b;
  if (x->tier != y->tier) return y->tier - x->tier;
  if (x->score != y->score) return x->score > y->score ? -1 : 1; // higher first
  return x->at - y->at;                                          // then earlier drawn
}

static int by_at(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

void eng_select_pick(eng_select_rule rule, eng_select_state *st, const uint64_t *samples, const double *cur,
                     int n, int keep, int *pick) {
  ranked *r = malloc((size_t)n * sizeof *r);
  if (!r) { // no memory to rank: the first drawn, as without selection
    for (int i = 0; i < keep; i++) pick[i] = i;
    return;
  }
  for (int i = 0; i < n; i++) {
    double c = isfinite(cur[i]) ? cur[i] : -INFINITY, s = c;
    int unseen = rule == ENG_SELECT_DYNAMICS && isnan(st->last[samples[i]]);
    if (rule == ENG_SELECT_REDUCIBLE) s = c - st->ref[samples[i]];
    else if (rule == ENG_SELECT_DYNAMICS && !unseen) s = st->last[samples[i]] - c;
    r[i] = (ranked){unseen, isnan(s) ? -INFINITY : s, i};
  }
  if (rule == ENG_SELECT_DYNAMICS)
    for (int i = 0; i < n; i++)
      if (isfinite(cur[i])) st->last[samples[i]] = (float)cur[i];
  qsort(r, (size_t)n, sizeof *r, by_score);
  for (int i = 0; i < keep; i++) pick[i] = r[i].at;
  qsort(pick, (size_t)keep, sizeof *pick, by_at);
  free(r);
}
