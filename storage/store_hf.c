// A checkpoint <-> a Hugging Face directory, through the engine's storage
// interface (store_engine_open): export is eng_ckpt_export_hf, which alone
// knows the checkpoint's shard names; import opens a run from the directory
// and eng_saves it.
#include "store_impl.h"

int store_ckpt_export_hf(store *s, const char *job, int64_t step, const eng_config *c, const char *dir,
                         int bf16, size_t max_shard_bytes, const eng_fs *src_fs, const char *src_dir, eng_err *e) {
  eng_store st;
  int rc = store_engine_open(&st, s, job, 0, e);
  if (rc) return rc;
  rc = eng_ckpt_export_hf(&st, step, c, dir, bf16, max_shard_bytes, src_fs, src_dir, e);
  st.close(st.ctx);
  return rc ? eng_err_prefix(e, "job \"%s\": ", job) : 0;
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
