// Opening and closing data sets: picks the loader by format, checks the
// arguments and cuts pretraining sources into windows.
#define _POSIX_C_SOURCE 200809L // strdup under -std=c17

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/data_impl.h"

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

// A pretraining source becomes windows of seq_len tokens, the tail dropped.
static int data_windows(eng_data *d, eng_err *e) {
  if (d->ntok < (uint64_t)d->seq_len)
    return eng_err_set(e, ENG_EINVAL, "%s: %llu tokens, fewer than one sample of seq_len %d", d->path,
                       (unsigned long long)d->ntok, d->seq_len);
  d->nsamples = d->ntok / (uint64_t)d->seq_len;
  return ENG_OK;
}

// The kind of a JSONL file's records, from the fields of its first one.
static int jsonl_sniff(const eng_data *d, const char *buf, size_t len, eng_data_format *f, eng_err *e) {
  uint64_t line = 1;
  for (const char *p = buf, *end = buf + len; p < end; line++) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
    const char *s = p;
    p += n + 1;
    size_t k = 0;
    while (k < n && (s[k] == ' ' || s[k] == '\t' || s[k] == '\r')) k++;
    if (k == n) continue;
    json_t *obj = json_loadb(s, n, JSON_DECODE_ANY, NULL);
    int ids = json_object_get(obj, "input_ids") != NULL, text = json_object_get(obj, "text") != NULL;
    int chat = json_object_get(obj, "messages") || json_object_get(obj, "prompt");
    json_decref(obj);
    if (!obj) return ENG_OK; // the loader names the syntax error
    if (ids + text + chat <= 1) {
      // none of them: the input_ids loader names what is missing
      *f = text ? ENG_DATA_TEXT : chat ? ENG_DATA_CHAT : ENG_DATA_IDS;
      return ENG_OK;
    }
    return eng_err_set(e, ENG_EINVAL,
                       "%s: line %llu: a record may hold only one of \"input_ids\", \"text\", \"messages\" or "
                       "\"prompt\"/\"completion\" (or set the data format)",
                       d->path, (unsigned long long)line);
  }
  return ENG_OK;
}

static const char *format_name(eng_data_format f) {
  static const char *const names[] = {"auto", "bin", "input_ids", "text", "chat"};
  return names[f];
}

// Loads a file read whole: buf[0..len), format f (not AUTO, not BIN).
static int data_load_buf(eng_data *d, const eng_data_opts *o, eng_data_format f, int jsonl, const char *buf,
                         size_t len, eng_err *e) {
  if (len == 0) return eng_err_set(e, ENG_EINVAL, "%s: empty file", d->path);
  // Bytes only where there is no tokenizer at all, never in place of one
  // that could not be read.
  if (f == ENG_DATA_TEXT && !jsonl && !o->tok && !o->no_tok) return eng_data_text_load(d, buf, len, e);
  if (f == ENG_DATA_IDS) return eng_data_jsonl_parse(d, buf, len, e);
  if (!o->tok)
    return eng_err_set(e, ENG_EINVAL, "%s: %s data needs a tokenizer: %s", d->path, format_name(f),
                       o->no_tok ? o->no_tok : "a model directory with a tokenizer.json");
  uint64_t key = 0;
  if (o->cache_dir) {
    key = eng_data_cache_key(o, buf, len);
    int rc = eng_data_cache_get(d, o->cache_dir, key, e);
    if (rc) return rc < 0 ? rc : ENG_OK;
  }
  int rc = f == ENG_DATA_CHAT ? eng_data_tok_chat(d, o, buf, len, e) : eng_data_tok_text(d, o, buf, len, jsonl, e);
  if (!rc && o->cache_dir) eng_data_cache_put(d, o->cache_dir, key);
  return rc;
}

static int data_load(eng_data *d, const eng_fs *fs, const eng_data_opts *o, eng_err *e) {
  int fd;
  int rc = eng_fs_open(fs, d->path, &fd, e);
  if (rc) return rc;
  eng_data_format f = o->format;
  int jsonl = ends_with(d->path, ".jsonl") || f == ENG_DATA_IDS || f == ENG_DATA_CHAT;
  if (f == ENG_DATA_BIN || (f == ENG_DATA_AUTO && (ends_with(d->path, ".bin") || eng_data_bin_sniff(fd)))) {
    rc = eng_data_bin_load(d, fd, e);
    return rc ? rc : data_windows(d, e);
  }
  char *buf;
  size_t len;
  rc = eng_fs_read_all(fd, d->path, &buf, &len, e);
  close(fd);
  if (rc) return rc;
  if (f == ENG_DATA_AUTO) {
    f = ENG_DATA_TEXT;
    if (jsonl) {
      f = ENG_DATA_IDS; // until the records say otherwise
      rc = jsonl_sniff(d, buf, len, &f, e);
    }
  }
  if (!rc) rc = data_load_buf(d, o, f, jsonl, buf, len, e);
  free(buf);
  if (rc) return rc;
  if (!d->rec_ids) return data_windows(d, e);
  if (o->pack) return eng_data_pack(d, e);
  d->nsamples = d->nrec;
  return ENG_OK;
}

static void data_summarize(eng_data *d) {
  int n;
  if (d->rec_ids)
    n = snprintf(d->summary, sizeof d->summary, "%llu records (%llu tokens before cutting), %llu cut to seq_len %d, in %llu samples",
                 (unsigned long long)d->nrec, (unsigned long long)d->ntok, (unsigned long long)d->ntrunc, d->seq_len,
                 (unsigned long long)d->nsamples);
  else
    n = snprintf(d->summary, sizeof d->summary, "%llu tokens in %llu samples of %d", (unsigned long long)d->ntok,
                 (unsigned long long)d->nsamples, d->seq_len);
  if (d->win_rec && n > 0 && (size_t)n < sizeof d->summary)
    n += snprintf(d->summary + n, sizeof d->summary - (size_t)n, ", packed (%.1f%% of their tokens are records)",
                  100.0 * (double)d->rec_off[d->nrec] / ((double)d->nsamples * d->seq_len));
  if (d->from_cache && n > 0 && (size_t)n < sizeof d->summary)
    snprintf(d->summary + n, sizeof d->summary - (size_t)n, ", tokens from the cache");
}

int eng_data_open(eng_data **out, const eng_fs *fs, const char *path, int seq_len, int vocab, uint64_t seed,
                  int shuffle, eng_err *e) {
  eng_data_opts o = {.seq_len = seq_len, .vocab = vocab, .seed = seed, .shuffle = shuffle, .eos = -1};
  return eng_data_open_opts(out, fs, path, &o, e);
}

int eng_data_open_opts(eng_data **out, const eng_fs *fs, const char *path, const eng_data_opts *o, eng_err *e) {
  *out = NULL;
  int seq_len = o->seq_len, vocab = o->vocab;
  if (seq_len <= 0) return eng_err_set(e, ENG_EINVAL, "%s: seq_len must be positive, got %d", path, seq_len);
  if (vocab <= 0) return eng_err_set(e, ENG_EINVAL, "%s: vocab must be positive, got %d", path, vocab);
  eng_data *d = calloc(1, sizeof *d);
  if (!d) return eng_err_set(e, ENG_ENOMEM, "%s: cannot allocate the data set", path);
  d->path = strdup(path);
  if (!d->path) {
    free(d);
    return eng_err_set(e, ENG_ENOMEM, "%s: cannot allocate the data set", path);
  }
  d->fd = -1;
  d->seq_len = seq_len;
  d->vocab = vocab;
  d->seed = o->seed;
  d->shuffle = o->shuffle != 0;
  int rc = data_load(d, fs, o, e);
  // The permutation holds 32-bit indices (eng_rng_shuffle_u32).
  if (!rc && d->shuffle && d->nsamples > UINT32_MAX)
    rc = eng_err_set(e, ENG_EINVAL, "%s: %llu samples, more than the %lu a shuffled data set can order", path,
                     (unsigned long long)d->nsamples, (unsigned long)UINT32_MAX);
  d->nfile = d->nsamples;
  if (!rc) rc = eng_data_order_init(d, e);
  if (rc) {
    eng_data_close(d);
    return rc;
  }
  data_summarize(d);
  *out = d;
  return ENG_OK;
}

int eng_data_packed(const eng_data *d) { return d->win_rec != NULL; }

const char *eng_data_summary(const eng_data *d) { return d->summary; }

uint64_t eng_data_samples(const eng_data *d) { return d->nsamples; }

uint64_t eng_data_file_samples(const eng_data *d) { return d->nfile; }

int eng_data_keep(eng_data *d, const uint8_t *keep, eng_err *e) {
  uint64_t n = 0;
  for (uint64_t i = 0; i < d->nfile; i++) n += keep[i] != 0;
  if (!n) return eng_err_set(e, ENG_EINVAL, "%s: the selection keeps none of its %llu samples", d->path,
                             (unsigned long long)d->nfile);
  uint32_t *kept = malloc(n * sizeof *kept);
  if (!kept) return eng_err_set(e, ENG_ENOMEM, "%s: cannot allocate the selection of %llu samples", d->path,
                                (unsigned long long)n);
  for (uint64_t i = 0, k = 0; i < d->nfile; i++)
    if (keep[i]) kept[k++] = (uint32_t)i;
  free(d->kept);
  free(d->order);
  d->order = NULL;
  d->kept = kept;
  d->nsamples = n;
  d->pos = (eng_data_pos){0, 0};
  return eng_data_order_init(d, e);
}

uint64_t eng_data_tokens(const eng_data *d) { return d->ntok; }

void eng_data_close(eng_data *d) {
  if (!d) return;
  if (d->fd >= 0) close(d->fd);
  free(d->raw);
  free(d->text_ids);
  free(d->rec_ids);
  free(d->rec_labels);
  free(d->rec_off);
  free(d->order);
  free(d->kept);
  free(d->win_rec);
  free(d->win_off);
  free(d->path);
  free(d);
}
