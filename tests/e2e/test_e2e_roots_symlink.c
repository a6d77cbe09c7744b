// Symlinks inside a model directory, through a real daemon: the data roots
// hold for every file a job opens, not only for the directory it names.
// - a Hugging Face cache snapshot (relative links into ../../blobs) trains
//   and exports as before;
// - config.json linked (absolutely) to a file outside the roots: the submit
//   is refused with the one answer for unreadable paths;
// - model.safetensors linked (relatively) out of the root: the job fails
//   naming it, instead of training on it;
// - tokenizer.json linked out of the root: the export is refused instead of
//   copying the outside file into it.
#define _GNU_SOURCE
#include "e2e/daemon.h"
#include "fixture.h"

#define NOT_THERE "not found under the data roots or not readable"
#define OK TRAIND__V1__JOB_STATE__JOB_STATE_SUCCEEDED
#define FAILED TRAIND__V1__JOB_STATE__JOB_STATE_FAILED

// data/<name>: a copy of the qwen3 fixture's config.json and weights.
static const char *model_copy(const char *name) {
  static char dir[600];
  snprintf(dir, sizeof dir, "%s/%s", tmp_path("data"), name);
  td_sh("mkdir -p %s && cp %s/config.json %s/model.safetensors %s/", dir, fx_dir("qwen3"), fx_dir("qwen3"), dir);
  return dir;
}

int main(void) {
  td t;
  td_init(&t);
  td_start(&t);
  static char msg[8192];
  const char *qwen3 = fx_dir("qwen3");
  // Outside every root: the files a link must not reach.
  char outside[600];
  snprintf(outside, sizeof outside, "%s", tmp_path("outside"));
  td_sh("mkdir -p %s && cp %s/config.json %s/model.safetensors %s/", outside, qwen3, qwen3, outside);
  td_write(tmp_path("outside/tokenizer.json"), "{\"outside\": true}", 17);

  // A cache snapshot: every file a relative link into ../../blobs.
  char snap[600];
  snprintf(snap, sizeof snap, "%s", tmp_path("data/hub/models--q/snapshots/abc"));
  td_sh("mkdir -p %s/../../blobs && cd %s/../../blobs && cp %s/config.json c1 && cp %s/model.safetensors w1 && "
        "cp %s/generation_config.json g1 && cd %s && ln -s ../../blobs/c1 config.json && "
        "ln -s ../../blobs/w1 model.safetensors && ln -s ../../blobs/g1 generation_config.json",
        snap, snap, qwen3, qwen3, qwen3, snap);
  int st = td_submit_outcome(&t, td_jobfile_hf("cache", snap, NULL, 2), msg, sizeof msg, 300);
  CHECK(st == OK, "the cache snapshot's job ended in state %d: %s", st, msg);
  printf("cache snapshot (relative links beneath the root): trained\n");

  // config.json -> an absolute path outside the roots.
  const char *dir = model_copy("esc_config");
  td_sh("ln -sf %s/config.json %s/config.json", outside, dir);
  st = td_submit_outcome(&t, td_jobfile_hf("esc_config", dir, NULL, 2), msg, sizeof msg, 300);
  CHECK(st == -1 && strstr(msg, "config.json: " NOT_THERE), "config.json linked outside: state %d: %s", st, msg);
  printf("config.json linked outside: refused: %s", msg);

  // model.safetensors -> ../../outside/model.safetensors, relative but out of the root.
  dir = model_copy("esc_weights");
  td_sh("cd %s && ln -sf ../../outside/model.safetensors model.safetensors", dir);
  st = td_submit_outcome(&t, td_jobfile_hf("esc_weights", dir, NULL, 2), msg, sizeof msg, 300);
  CHECK((st == -1 || st == FAILED) && strstr(msg, "model.safetensors: " NOT_THERE),
        "model.safetensors linked out of the root: state %d: %s", st, msg);
  printf("model.safetensors linked out of the root: %s: %s\n", st == -1 ? "refused" : "failed", msg);

  // tokenizer.json -> outside: training on token ids never needs it (a
  // tokenizer the job cannot read fails only text and chat data), the
  // export would copy it.
  dir = model_copy("esc_tok");
  td_sh("ln -s %s/tokenizer.json %s/tokenizer.json", outside, dir);
  const char *ids = tmp_path("data/ids.jsonl");
  td_sh("for i in 1 2 3 4 5 6 7 8; do echo '{\"input_ids\": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]}'; done > %s", ids);
  int rc = td_ctl(&t, msg, sizeof msg, "submit %s", td_jobfile_hf("esc_tok", dir, ids, 2));
  CHECK(rc == 0, "submit esc_tok exited %d: %s", rc, msg);
  char id[80];
  CHECK(sscanf(msg, "%79s", id) == 1, "no job id: %s", msg);
  Traind__V1__Job *j = td_wait_done(&t, id, 300);
  CHECK(j->state == OK, "job %s ended in state %d: %s", id, j->state, j->error);
  protobuf_c_message_free_unpacked(&j->base, NULL);
  const char *exp = tmp_path("export");
  rc = td_ctl(&t, msg, sizeof msg, "export %s %s 2>&1", id, exp);
  CHECK(rc != 0 && strstr(msg, "tokenizer.json: " NOT_THERE), "export with tokenizer.json linked outside: exit %d: %s",
        rc, msg);
  struct stat sb;
  CHECK(stat(tmp_path("export/tokenizer.json"), &sb) != 0, "the export holds the outside tokenizer.json");
  printf("tokenizer.json linked outside: the export is refused: %s", msg);

  // Text through it: the job fails naming the tokenizer, rather than reading
  // the text byte by byte.
  st = td_submit_outcome(&t, td_jobfile_hf("esc_tok_text", dir, NULL, 2), msg, sizeof msg, 300);
  CHECK(st == FAILED && strstr(msg, "text data needs a tokenizer") && strstr(msg, "tokenizer.json: " NOT_THERE),
        "text with tokenizer.json linked outside: state %d: %s", st, msg);
  printf("tokenizer.json linked outside: text fails: %s\n", msg);
  td_finish(&t);
  return 0;
}
