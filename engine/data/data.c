// Opening and closing data sets: picks the loader by format, checks the
// arguments and cuts pretraining sources into windows.
#define _POSIX_C_SOURCE 200809L // strdup under -std=c17

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

static int data_load(eng_data *d, const eng_fs *fs, eng_err *e) {
  int fd;
  int rc = eng_fs_open(fs, d->path, &fd, e);
  if (rc) return rc;
  if (ends_with(d->path, ".jsonl")) return eng_data_jsonl_load(d, fd, e);
  rc = ends_with(d->path, ".bin") || eng_data_bin_sniff(fd) ? eng_data_bin_load(d, fd, e)
                                                            : eng_data_text_load(d, fd, e);
  return rc ? rc : data_windows(d, e);
}

int eng_data_open(eng_data **out, const eng_fs *fs, const char *path, int seq_len, int vocab, uint64_t seed,
                  int shuffle, eng_err *e) {
  *out = NULL;
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
  d->seed = seed;
  d->shuffle = shuffle != 0;
  int rc = data_load(d, fs, e);
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
  *out = d;
  return ENG_OK;
}

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
  free(d->path);
  free(d);
}
