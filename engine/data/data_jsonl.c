// Supervised fine-tuning records, one JSON object per line. Every line is
// parsed and checked at open; the records are kept truncated to seq_len in
// two compact int32 arrays (ids, labels) with per-record offsets.
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/json_file.h"
#include "data/data_impl.h"

// Growth state of the record arrays, which live in d as soon as they exist
// so that eng_data_close frees them on any error.
typedef struct jsonl_cap {
  uint64_t toks;  // capacity of rec_ids and rec_labels
  uint64_t recs;  // capacity of rec_off, in records (it holds recs + 1 offsets)
} jsonl_cap;

static int jsonl_reserve(eng_data *d, jsonl_cap *cap, uint64_t ntoks, eng_err *e) {
  uint64_t nrec = d->nsamples, used = d->rec_off[nrec];
  if (nrec == cap->recs) {
    uint64_t n = cap->recs * 2;
    uint64_t *off = realloc(d->rec_off, (n + 1) * sizeof *off);
    if (!off) return eng_err_set(e, ENG_ENOMEM, "%s: cannot grow the record table to %llu records", d->path,
                                 (unsigned long long)n);
    d->rec_off = off;
    cap->recs = n;
  }
  if (used + ntoks > cap->toks) {
    uint64_t n = cap->toks * 2 > used + ntoks ? cap->toks * 2 : used + ntoks;
    int32_t *ids = realloc(d->rec_ids, n * sizeof *ids);
    if (ids) d->rec_ids = ids;
    int32_t *labels = ids ? realloc(d->rec_labels, n * sizeof *labels) : NULL;
    if (labels) d->rec_labels = labels;
    if (!ids || !labels)
      return eng_err_set(e, ENG_ENOMEM, "%s: cannot grow the token arrays to %llu tokens", d->path,
                         (unsigned long long)n);
    cap->toks = n;
  }
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

static int jsonl_record(eng_data *d, jsonl_cap *cap, json_t *obj, uint64_t line, eng_err *e) {
  unsigned long long ln = (unsigned long long)line;
  if (!json_is_object(obj)) return eng_err_set(e, ENG_EINVAL, "%s: line %llu: not a JSON object", d->path, ln);
  json_t *ids = json_object_get(obj, "input_ids");
  if (!ids) return eng_err_set(e, ENG_EINVAL, "%s: line %llu: field \"input_ids\" is missing", d->path, ln);
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
  // Only the first seq_len tokens are ever served: keep just those.
  size_t keep = n < (size_t)d->seq_len ? n : (size_t)d->seq_len;
  rc = jsonl_reserve(d, cap, keep, e);
  if (rc) return rc;
  uint64_t at = d->rec_off[d->nsamples];
  for (size_t k = 0; k < keep; k++) {
    d->rec_ids[at + k] = (int32_t)json_integer_value(json_array_get(ids, k));
    d->rec_labels[at + k] = labels ? (int32_t)json_integer_value(json_array_get(labels, k)) : d->rec_ids[at + k];
  }
  d->nsamples++;
  d->rec_off[d->nsamples] = at + keep;
  d->ntok += n;
  return ENG_OK;
}

static int jsonl_blank(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return 0;
  return 1;
}

static int jsonl_parse(eng_data *d, const char *buf, size_t len, eng_err *e) {
  jsonl_cap cap = {.toks = 4096, .recs = 64};
  d->rec_off = malloc((cap.recs + 1) * sizeof *d->rec_off);
  d->rec_ids = malloc(cap.toks * sizeof *d->rec_ids);
  d->rec_labels = malloc(cap.toks * sizeof *d->rec_labels);
  if (!d->rec_off || !d->rec_ids || !d->rec_labels)
    return eng_err_set(e, ENG_ENOMEM, "%s: cannot allocate the record arrays", d->path);
  d->rec_off[0] = 0;
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
    int rc = jsonl_record(d, &cap, obj, line + 1, e);
    json_decref(obj);
    if (rc) return rc;
  }
  if (d->nsamples == 0) return eng_err_set(e, ENG_EINVAL, "%s: no records, only blank lines", d->path);
  return ENG_OK;
}

int eng_data_jsonl_load(eng_data *d, int fd, eng_err *e) {
  char *buf;
  size_t len;
  int rc = eng_data_file_read(d, fd, &buf, &len, e);
  close(fd);
  if (rc) return rc;
  rc = len == 0 ? eng_err_set(e, ENG_EINVAL, "%s: empty file", d->path) : jsonl_parse(d, buf, len, e);
  free(buf);
  return rc;
}
