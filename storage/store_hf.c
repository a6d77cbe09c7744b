// A checkpoint <-> a Hugging Face directory. Export reads the fp32 weights
// ("w.<shard>", one per layout shard, as eng_save writes them) and hands them
// to eng_hf_save; import opens a run from the directory and eng_saves it.
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "model/hf_io.h"
#include "model/layout.h"
#include "store_impl.h"

int store_ckpt_export_hf(store *s, const char *job, int64_t step, const eng_config *c, const char *dir,
                         int bf16, size_t max_shard_bytes, const eng_fs *src_fs, const char *src_dir, eng_err *e) {
  int rc = eng_config_validate(c, "export config", e);
  if (rc) return rc;
  if (step < 0) {
    rc = store_ckpt_latest(s, job, &step, e);
    if (rc == 1) return eng_err_set(e, ENG_EINVAL, "job \"%s\" has no checkpoint to export", job);
    if (rc) return rc;
  }
  eng_layout lo;
  eng_layout_init(&lo, c);
  float **w = calloc((size_t)lo.n_shards, sizeof *w);
  if (!w) return eng_err_set(e, ENG_ENOMEM, "cannot allocate %d shard pointers", lo.n_shards);
  for (int i = 0; i < lo.n_shards && !rc; i++) {
    char name[32];
    snprintf(name, sizeof name, "w.%d", i);
    size_t want = eng_layout_shard_numel(&lo, i) * sizeof(float), have;
    rc = store_ckpt_size(s, job, step, name, &have, e);
    if (!rc && have != want)
      rc = eng_err_set(e, ENG_EINVAL, "checkpoint of job \"%s\" at step %" PRId64 ": shard \"%s\" has %zu "
                       "bytes, the export config gives %zu: config and checkpoint differ", job, step, name,
                       have, want);
    if (!rc && !(w[i] = malloc(want ? want : 1)))
      rc = eng_err_set(e, ENG_ENOMEM, "cannot allocate %zu bytes for shard \"%s\"", want, name);
    if (!rc) rc = store_ckpt_load(s, job, step, name, w[i], want, e);
  }
  if (!rc) rc = eng_hf_save(dir, c, &lo, (const float *const *)w, bf16, max_shard_bytes, src_fs, src_dir, e);
  for (int i = 0; i < lo.n_shards; i++) free(w[i]);
  free(w);
  return rc;
}

int store_ckpt_import_hf(store *s, const char *job, const char *hf_dir, eng_err *e) {
  eng_spec sp;
  eng_spec_defaults(&sp);
  sp.model_dir = hf_dir;
  sp.seq_len = 2; // no step runs: the smallest arena that opens
  sp.batch = 1;
  size_t need;
  int rc = eng_spec_device_bytes(&sp, &need, e);
  if (rc) return rc;
  sp.device_cap = need;
  eng_run *r;
  if ((rc = eng_open(&sp, &r, e))) return rc;
  eng_store st;
  if (!(rc = store_engine_open(&st, s, job, 0, e))) {
    rc = eng_save(r, &st, e);
    st.close(st.ctx);
  }
  eng_close(r);
  return rc ? eng_err_prefix(e, "importing %s as job \"%s\": ", hf_dir, job) : 0;
}
