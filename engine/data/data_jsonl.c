// Supervised fine-tuning records, one JSON object per line. Every line is
// parsed and checked at open; the records are kept truncated to seq_len in
// two compact int32 arrays (ids, labels) with per-record offsets.
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "common/json_file.h"
#include "data/data_impl.h"

// The record arrays live in d as soon as they exist, so that
// eng_data_close frees them on any error.
static int rec_reserve(eng_data *d, uint64_t ntoks, eng_err *e) {
  if (!d->rec_off) {
    d->cap_recs = 64;
    d->cap_toks = 4096;
    d->rec_off = malloc((d->cap_recs + 1) * sizeof *d->rec_off);
    d->rec_ids = malloc(d->cap_toks * sizeof *d->rec_ids);
    d->rec_labels = malloc(d->cap_toks * sizeof *d->rec_labels);
    if (!d->rec_off || !d->rec_ids || !d->rec_labels)
      return eng_err_set(e, ENG_ENOMEM, "%s: cannot allocate the record arrays", d->path);
    d->rec_off[0] = 0;
  }
  uint64_t nrec = d->nrec, used = d->rec_off[nrec];
  if (nrec == d->cap_recs) {
    uint64_t n = d->cap_recs * 2;
    uint64_t *off = realloc(d->rec_off, (n + 1) * sizeof *off);
    if (!off) return eng_err_set(e, ENG_ENOMEM, "%s: cannot grow the record table to %llu records", d->path,
                                 (unsigned long long)n);
    d->rec_off = off;
    d->cap_recs = n;
  }
  if (used + ntoks > d->cap_toks) {
    uint64_t n = d->cap_toks * 2 > used + ntoks ? d->cap_toks * 2 : used + ntoks;
    int32_t *ids = realloc(d->rec_ids, n * sizeof *ids);
    if (ids) d->rec_ids = ids;
    int32_t *labels = ids ? realloc(d->rec_labels, n * sizeof *labels) : NULL;
    if (labels) d->rec_labels = labels;
    if (!ids || !labels)
      return eng_err_set(e, ENG_ENOMEM, "%s: cannot grow the token arrays to %llu tokens", d->path,
                         (unsigned long long)n);
    d->cap_toks = n;
  }
  return ENG_OK;
}

int eng_data_rec_add(eng_data *d, const int32_t *ids, const int32_t *labels, size_t n, eng_err *e) {
  // Only the first seq_len tokens are ever served: keep just those.
  size_t keep = n < (size_t)d->seq_len ? n : (size_t)d->seq_len;
  int rc = rec_reserve(d, keep, e);
  if (rc) return rc;
  uint64_t at = d->rec_off[d->nrec];
  memcpy(d->rec_ids + at, ids, keep * sizeof *ids);
  memcpy(d->rec_labels + at, labels ? labels : ids, keep * sizeof *ids);
  d->nrec++;
  d->rec_off[d->nrec] = at + keep;
  d->ntok += n;
  d->ntrunc += keep < n;
  return ENG_OK;
}

// Checks one integer array field; the label field also admits ENG_DATA_IGNORE.
static int jsonl_check_ints(const eng_data *d, uint64_t line, const char *field, json_t *arr, int is_label,
                            eng_err *e) {
  size_t k;
  json_t *v;
  json_array_foreach(arr, k, v) {
    if (!json_is_integer(v))
      return eng_err_set(e, ENG_EINVAL, "%s: line %llu: %s[%zu] is not an integer", d->path,
                         (unsigned long long)line, field, k);
    json_int_t x = json_integer_value(v);
    if (is_label && x == ENG_DATA_IGNORE) continue;
    if (x < 0 || x >= d->vocab)
      return eng_err_set(e, ENG_EINVAL, "%s: line %llu: %s[%zu] is %" JSON_INTEGER_FORMAT ", %sin [0, vocab %d)",
                         d->path, (unsigned long long)line, field, k, x, is_label ? "neither -100 nor " : "not ",
                         d->vocab);
  }
  return ENG_OK;
}

static int jsonl_record(eng_data *d, json_t *obj, uint64_t line, eng_err *e) {
  unsigned long long ln = (unsigned long long)line;
  if (!json_is_object(obj)) return eng_err_set(e, ENG_EINVAL, "%s: line %llu: not a JSON object", d->path, ln);
  json_t *ids = json_object_get(obj, "input_ids");
  if (!ids) return eng_err_set(e, ENG_EINVAL,
                                 "%s: line %llu: field \"input_ids\" is missing (a record holds \"input_ids\", "
                                 "\"text\", \"messages\" or \"prompt\"/\"completion\")",
                                 d->path, ln);
  if (!json_is_array(ids))
    return eng_err_set(e, ENG_EINVAL, "%s: line %llu: field \"input_ids\" is not an array", d->path, ln);
  size_t n = json_array_size(ids);
  if (n == 0) return eng_err_set(e, ENG_EINVAL, "%s: line %llu: empty record: \"input_ids\" is []", d->path, ln);
  int rc = jsonl_check_ints(d, line, "input_ids", ids, 0, e);
  if (rc) return rc;
  json_t *labels = json_object_get(obj, "labels");
  if (labels) {
    if (!json_is_array(labels))
      return eng_err_set(e, ENG_EINVAL, "%s: line %llu: field \"labels\" is not an array", d->path, ln);
    if (json_array_size(labels) != n)
      return eng_err_set(e, ENG_EINVAL, "%s: line %llu: \"labels\" has %zu entries but \"input_ids\" has %zu",
                         d->path, ln, json_array_size(labels), n);
    rc = jsonl_check_ints(d, line, "labels", labels, 1, e);
    if (rc) return rc;
  }
  int32_t *ri = malloc(2 * n * sizeof *ri);
  if (!ri) return eng_err_set(e, ENG_ENOMEM, "%s: line %llu: cannot allocate %zu tokens", d->path, ln, n);
  int32_t *rl = ri + n;
  for (size_t k = 0; k < n; k++) {
    ri[k] = (int32_t)json_integer_value(json_array_get(ids, k));
    rl[k] = labels ? (int32_t)json_integer_value(json_array_get(labels, k)) : ri[k];
  }
  rc = eng_data_rec_add(d, ri, rl, n, e);
  free(ri);
  return rc;
}

static int jsonl_blank(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return 0;
  return 1;
}

int eng_data_jsonl_parse(eng_data *d, const char *buf, size_t len, eng_err *e) {
  uint64_t line = 0;
  for (const char *p = buf, *end = buf + len; p < end; line++) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
    const char *s = p;
    p += n + 1;
    if (jsonl_blank(s, n)) continue;
    json_error_t jerr;
    json_t *obj = json_loadb(s, n, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
    if (!obj)
      return eng_err_set(e, ENG_EINVAL, "%s: line %llu: not valid JSON at column %d: %s", d->path,
                         (unsigned long long)line + 1, jerr.column, eng_json_fault(&jerr));
    int rc = jsonl_record(d, obj, line + 1, e);
    json_decref(obj);
    if (rc) return rc;
  }
  if (d->nrec == 0) return eng_err_set(e, ENG_EINVAL, "%s: no records, only blank lines", d->path);
  return ENG_OK;
}
