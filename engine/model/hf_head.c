// A config that ties the head to the embedding, with weights that hold a head
// of their own. transformers 5 (PreTrainedModel.tie_weights during
// from_pretrained) compares the two with torch.equal and, when they differ,
// warns and leaves them untied: the model computes with the file's head.
// The engine does the same, so such a checkpoint means what it means there.
#include <stdio.h>
#include <stdlib.h>

#include "model/hf_io.h"

#define HEAD_NAME "lm_head.weight"

// Row r of matrix t as a tensor of its own, so that comparing a large head
// needs two rows of memory and not two matrices.
static eng_st_tensor row_of(const eng_st_tensor *t, int64_t r) {
  eng_st_tensor row = *t;
  const size_t bytes = (size_t)t->shape[1] * eng_st_dtype_size(t->dtype);
  row.ndim = 1;
  row.shape[0] = t->shape[1];
  row.numel = (size_t)t->shape[1];
  row.begin = t->begin + (size_t)r * bytes;
  row.end = row.begin + bytes;
  return row;
}

// torch.equal after both are widened to fp32: value by value, so +0 equals
// -0 and a NaN equals nothing.
static int same_rows(const eng_st_file *fa, const eng_st_tensor *a, const eng_st_file *fb,
                     const eng_st_tensor *b, int *same, eng_err *e) {
  *same = a->ndim == 2 && b->ndim == 2 && a->shape[0] == b->shape[0] && a->shape[1] == b->shape[1];
  if (!*same) return ENG_OK;
  const size_t cols = (size_t)a->shape[1];
  float *ra = malloc((2 * cols + 1) * sizeof *ra), *rb = ra + cols; // + 1: never malloc(0)
  if (!ra) return eng_err_set(e, ENG_ENOMEM, "%s: out of memory comparing %s with %s", fb->path,
                              b->name, a->name);
  int rc = ENG_OK;
  for (int64_t r = 0; *same && !rc && r < a->shape[0]; r++) {
    eng_st_tensor row_a = row_of(a, r), row_b = row_of(b, r);
    rc = eng_st_read_f32(fa, &row_a, ra, e);
    if (!rc) rc = eng_st_read_f32(fb, &row_b, rb, e);
    for (size_t i = 0; !rc && *same && i < cols; i++) *same = ra[i] == rb[i];
  }
  free(ra);
  return rc;
}

int eng_hf_head_distinct(const eng_fs *fs, const char *dir, const char *embed_name, int *distinct, eng_err *e) {
  eng_st_file fe = {0}, fh = {0};
  const eng_st_tensor *embed = NULL, *head = NULL;
  *distinct = 0;
  int rc = eng_hf_open_tensor(fs, dir, HEAD_NAME, &fh, &head, e);
  // Without an embedding there is nothing to compare with; the loader
  // reports it missing.
  if (!rc && head) rc = eng_hf_open_tensor(fs, dir, embed_name, &fe, &embed, e);
  if (!rc && head && embed) {
    int same;
    rc = same_rows(&fe, embed, &fh, head, &same, e);
    *distinct = !rc && !same;
  }
  eng_st_close(&fe);
  eng_st_close(&fh);
  return rc;
}

int eng_hf_load_config(const eng_fs *fs, const char *dir, eng_config *c, int *untied, eng_err *e) {
  char path[4096];
  *untied = 0;
  int n = snprintf(path, sizeof path, "%s/config.json", dir);
  if (n < 0 || (size_t)n >= sizeof path)
    return eng_err_set(e, ENG_EINVAL, "%.200s/config.json: path is too long", dir);
  int rc = eng_config_load(fs, path, c, e);
  if (rc || !c->tie_embeddings) return rc;
  eng_layout lo;
  eng_layout_init(&lo, c);
  rc = eng_hf_head_distinct(fs, dir, lo.embed.name, untied, e);
  if (!rc && *untied) c->tie_embeddings = 0;
  return rc;
}
