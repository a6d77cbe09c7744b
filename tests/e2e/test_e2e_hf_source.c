// Jobs that start from a Hugging Face directory, through a real daemon:
// - qwen3_tied_head (config.json ties the head, the file holds one of its
//   own): the job trains untied, as transformers loads it, and its log says
//   so;
// - llama_tok (a tokenizer and bos/eos/pad ids): `trainctl export` writes
//   the tokenizer files and the token ids too, and
//   tests/ref/check_export_tokenizer.py (TRAIND_PYTHON, never skipped) loads
//   the export in transformers and generates; once the directory is gone,
//   an export is refused by the field's name rather than written without.
#define _GNU_SOURCE
#include "daemon.h"
#include "fixture.h"
#include "python.h"

// Runs the job of model directory dir to SUCCEEDED; returns its id (static).
static const char *run(td *t, const char *name, const char *dir, int *tied) {
  static char id[80];
  snprintf(id, sizeof id, "%s", td_submit(t, td_jobfile_hf(name, dir, NULL, 4), NULL));
  Traind__V1__Job *j = td_wait_done(t, id, 300);
  CHECK(j->state == TRAIND__V1__JOB_STATE__JOB_STATE_SUCCEEDED, "job %s (%s) ended in state %d: %s", id, name,
        j->state, j->error);
  CHECK(j->model, "job %s has no model config", id);
  *tied = j->model->tie_word_embeddings;
  protobuf_c_message_free_unpacked(&j->base, NULL);
  return id;
}

int main(void) {
  td t;
  td_init(&t);
  td_root_fixtures(&t);
  td_start(&t);
  static char out[65536];
  int tied;

  const char *id = run(&t, "qwen3_tied_head", fx_dir("qwen3_tied_head"), &tied);
  CHECK(!tied, "job %s: the config with a head of its own stayed tied", id);
  td_logs(&t, id, out, sizeof out);
  CHECK(strstr(out, "lm_head.weight") && strstr(out, "untied"), "job %s: the log does not say the head is untied:\n%s",
        id, out);
  printf("qwen3_tied_head: trained untied, and the log says so\n");

  // A copy under the daemon's own data root, to take away later.
  char src[600], cmd[4096];
  snprintf(src, sizeof src, "%s", tmp_path("data/llama_tok"));
  snprintf(cmd, sizeof cmd, "cp -r %s %s", fx_dir("llama_tok"), src);
  CHECK(system(cmd) == 0, "%s failed", cmd);
  id = run(&t, "llama_tok", src, &tied);
  const char *dir = tmp_path("export");
  int rc = td_ctl(&t, out, sizeof out, "export %s %s", id, dir);
  CHECK(rc == 0, "trainctl export exited %d:\n%s", rc, out);
  py_check_export_tokenizer(dir, src);
  printf("llama_tok: the export keeps the tokenizer and the token ids\n");

  char gone[600];
  snprintf(gone, sizeof gone, "%s", tmp_path("llama_tok.gone"));
  CHECK(rename(src, gone) == 0, "cannot move %s away", src);
  rc = td_ctl(&t, out, sizeof out, "export %s %s 2>&1", id, tmp_path("export2"));
  CHECK(rc == 3 && strstr(out, "spec.model.hf_dir") && strstr(out, "tokenizer"),
        "an export without its source directory: exit %d:\n%s", rc, out);
  printf("llama_tok: without its directory the export is refused: %s", out);
  td_finish(&t);
  return 0;
}
