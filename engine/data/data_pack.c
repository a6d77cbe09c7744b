// Packing records into samples: first fit, in file order, over the samples
// still open, so the result depends on the file alone (a resumed run packs
// the same way). Searching only the last PACK_OPEN open samples keeps it
// linear; a record that fits none of them opens a new one.
#include <stdlib.h>

#include "data/data_impl.h"

enum { PACK_OPEN = 64 };

int eng_data_pack(eng_data *d, eng_err *e) {
  uint64_t n = d->nrec, T = (uint64_t)d->seq_len;
  uint64_t *fill = malloc((n + 1) * sizeof *fill);  // tokens in each sample
  uint64_t *bin = malloc((n + 1) * sizeof *bin);    // sample of each record
  uint64_t *count = calloc(n + 1, sizeof *count);   // records per sample
  int rc = ENG_OK;
  if (!fill || !bin || !count) {
    rc = eng_err_set(e, ENG_ENOMEM, "%s: cannot allocate the packing of %llu records", d->path,
                     (unsigned long long)n);
    goto out;
  }
  uint64_t nbin = 0;
  for (uint64_t r = 0; r < n; r++) {
    uint64_t len = d->rec_off[r + 1] - d->rec_off[r], b = nbin;
    for (uint64_t k = nbin > PACK_OPEN ? nbin - PACK_OPEN : 0; k < nbin; k++)
      if (fill[k] + len <= T) {
        b = k;
        break;
      }
    if (b == nbin) fill[nbin++] = 0;
    fill[b] += len;
    bin[r] = b;
    count[b]++;
  }
  d->win_off = malloc((nbin + 1) * sizeof *d->win_off);
  d->win_rec = malloc((n ? n : 1) * sizeof *d->win_rec);
  if (!d->win_off || !d->win_rec) {
    rc = eng_err_set(e, ENG_ENOMEM, "%s: cannot allocate the packing of %llu records", d->path,
                     (unsigned long long)n);
    goto out;
  }
  d->win_off[0] = 0;
  for (uint64_t k = 0; k < nbin; k++) d->win_off[k + 1] = d->win_off[k] + count[k];
  // Records in file order within each sample: fill[] becomes a cursor.
  for (uint64_t k = 0; k < nbin; k++) fill[k] = d->win_off[k];
  for (uint64_t r = 0; r < n; r++) d->win_rec[fill[bin[r]]++] = (uint32_t)r;
  d->nsamples = nbin;
out:
  free(fill);
  free(bin);
  free(count);
  return rc;
}
