// Serving samples: the per-epoch order, batching, and the position that a
// checkpoint saves.
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "data/data_impl.h"

// The permutation of pos.epoch depends on (seed, epoch) only, so any epoch's
// order can be rebuilt from the position alone.
static void order_fill(eng_data *d) {
  for (uint64_t i = 0; i < d->nsamples; i++) d->order[i] = (uint32_t)i;
  eng_rng r;
  eng_rng_seed(&r, d->seed, ENG_DATA_RNG_STREAM + d->pos.epoch);
  eng_rng_shuffle_u32(&r, d->order, d->nsamples);
}

int eng_data_order_init(eng_data *d, eng_err *e) {
  if (!d->shuffle) return ENG_OK;
  d->order = malloc(d->nsamples * sizeof *d->order);
  if (!d->order)
    return eng_err_set(e, ENG_ENOMEM, "%s: cannot allocate the order of %llu samples", d->path,
                       (unsigned long long)d->nsamples);
  order_fill(d);
  return ENG_OK;
}

// A packed sample: its records one after another, each with positions from
// 0 and its first label ignored, then padding (a run of its own).
static void packed_fill(const eng_data *d, uint64_t s, int32_t *ids, int32_t *labels, int32_t *pos) {
  int T = d->seq_len, t = 0;
  for (uint64_t k = d->win_off[s]; k < d->win_off[s + 1]; k++) {
    uint64_t r = d->win_rec[k];
    int n = (int)(d->rec_off[r + 1] - d->rec_off[r]);
    const int32_t *ri = d->rec_ids + d->rec_off[r], *rl = d->rec_labels + d->rec_off[r];
    for (int i = 0; i < n; i++, t++) {
      ids[t] = ri[i];
      labels[t] = i ? rl[i] : ENG_DATA_IGNORE;
      pos[t] = i;
    }
  }
  for (int i = 0; t < T; i++, t++) {
    ids[t] = 0;
    labels[t] = ENG_DATA_IGNORE;
    pos[t] = i;
  }
}

static int sample_fill(eng_data *d, uint64_t s, int32_t *ids, int32_t *labels, int32_t *pos, eng_err *e) {
  int T = d->seq_len, rc;
  if (d->win_rec) {
    packed_fill(d, s, ids, labels, pos);
    return ENG_OK;
  }
  if (pos)
    for (int t = 0; t < T; t++) pos[t] = t;
  if (d->rec_ids) {
    int n = (int)(d->rec_off[s + 1] - d->rec_off[s]); // at most T: truncated at load
    const int32_t *ri = d->rec_ids + d->rec_off[s], *rl = d->rec_labels + d->rec_off[s];
    for (int t = 0; t < n; t++) {
      ids[t] = ri[t];
      labels[t] = rl[t];
    }
    for (int t = n; t < T; t++) {
      ids[t] = 0;
      labels[t] = ENG_DATA_IGNORE;
    }
    return ENG_OK;
  }
  uint64_t at = s * (uint64_t)T;
  if (d->text_ids)
    memcpy(ids, d->text_ids + at, (size_t)T * sizeof *ids);
  else if ((rc = eng_data_bin_read(d, at, (size_t)T, ids, e)))
    return rc;
  memcpy(labels, ids, (size_t)T * sizeof *labels);
  return ENG_OK;
}

int eng_data_next(eng_data *d, int batch, int32_t *ids, int32_t *labels, eng_err *e) {
  return eng_data_next_samples(d, batch, ids, labels, NULL, NULL, e);
}

int eng_data_next_samples(eng_data *d, int batch, int32_t *ids, int32_t *labels, int32_t *pos, uint64_t *samples,
                          eng_err *e) {
  if (batch <= 0) return eng_err_set(e, ENG_EINVAL, "%s: batch must be positive, got %d", d->path, batch);
  if (!ids || !labels) return eng_err_set(e, ENG_EINVAL, "%s: no buffer for the batch's ids or labels", d->path);
  if (d->win_rec && !pos)
    return eng_err_set(e, ENG_EINVAL, "%s: packed samples must be read with their positions", d->path);
  size_t T = (size_t)d->seq_len;
  for (int b = 0; b < batch; b++) {
    uint64_t s = d->order ? d->order[d->pos.index] : d->pos.index;
    if (d->kept) s = d->kept[s];
    if (samples) samples[b] = s;
    int rc = sample_fill(d, s, ids + (size_t)b * T, labels + (size_t)b * T, pos ? pos + (size_t)b * T : NULL, e);
    if (rc) return rc;
    if (++d->pos.index == d->nsamples) {
      d->pos.epoch++;
      d->pos.index = 0;
      if (d->order) order_fill(d);
    }
  }
  return ENG_OK;
}

void eng_data_pos_get(const eng_data *d, eng_data_pos *p) { *p = d->pos; }

int eng_data_pos_set(eng_data *d, const eng_data_pos *p, eng_err *e) {
  if (p->index >= d->nsamples)
    return eng_err_set(e, ENG_EINVAL,
                       "%s: position index %llu is past the %llu samples per epoch (the file or seq_len changed "
                       "since the position was saved?)",
                       d->path, (unsigned long long)p->index, (unsigned long long)d->nsamples);
  uint64_t old_epoch = d->pos.epoch;
  d->pos = *p;
  if (d->order && p->epoch != old_epoch) order_fill(d);
  return ENG_OK;
}
