// Chat fine-tuning through a real daemon, as a user does it: a Hugging Face
// directory (a tiny Qwen2 written by the engine, with the ChatML tokenizer of
// tests/fixtures/tok/qwen2) and a JSONL of conversations, submitted with
// trainctl:
// - the job trains to SUCCEEDED, its log says how the records were packed;
// - a second job on the same file reads the tokens from the state
//   directory's cache, and says so;
// - `trainctl export` writes the tokenizer files with the model;
// - a file with a bad record fails its job with an error that names the
//   file, the line and the field.
#define _GNU_SOURCE
#include "daemon.h"
#include "tiny.h"
#include "tok_fixture.h"

static void copy(const char *from, const char *to) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "cp '%s' '%s'", from, to);
  CHECK(system(cmd) == 0, "%s failed", cmd);
}

static int same_file(const char *a, const char *b) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", a, b);
  return system(cmd) == 0;
}

// The model directory: random weights of a Qwen2 shape whose vocabulary
// holds the tokenizer's, and the tokenizer files.
static void make_model(const char *dir) {
  eng_err e = {0};
  eng_tok *tok = tok_fixture("qwen2", NULL);
  eng_spec s;
  tiny_spec(&s, 2);
  s.config.arch = ENG_ARCH_QWEN2;
  s.config.qkv_bias = 1;
  s.config.qk_norm = 0;
  s.config.vocab = (eng_tok_vocab(tok) + 63) / 64 * 64;
  s.config.tie_embeddings = 1;
  s.train_path = NULL;
  eng_tok_free(tok);
  eng_run *r;
  CHECK_OK(eng_open(&s, &r, &e), &e);
  CHECK_OK(eng_export_hf(r, dir, 0, &e), &e);
  eng_close(r);
  static const char *const files[] = {"tokenizer.json", "tokenizer_config.json"};
  for (int i = 0; i < 2; i++) {
    char to[700];
    snprintf(to, sizeof to, "%s/%s", dir, files[i]);
    copy(tok_fixture_path("qwen2", files[i]), to);
  }
}

static const char *write_chat(const char *name, int bad_line) {
  const char *path = tmp_path(name);
  FILE *f = fopen(path, "w");
  CHECK(f, "cannot write %s", path);
  static const char *const q[] = {"What is 2+2?", "Name a colour.", "Say hi.", "Capital of Italy?"};
  static const char *const a[] = {"4.", "Blue.", "Hi!", "Rome."};
  for (int i = 0; i < 40; i++) {
    if (i + 1 == bad_line) {
      fprintf(f, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"robot\", \"content\": \"beep\"}]}\n");
      continue;
    }
    fprintf(f, "{\"messages\": [");
    if (i % 3 == 0) fprintf(f, "{\"role\": \"system\", \"content\": \"Be brief.\"}, ");
    fprintf(f, "{\"role\": \"user\", \"content\": \"%s\"}, {\"role\": \"assistant\", \"content\": \"%s\"}]}\n", q[i % 4],
            a[i % 4]);
  }
  fclose(f);
  return path;
}

int main(void) {
  td t;
  td_init(&t);
  td_start(&t);
  static char out[65536];
  char model[400];
  snprintf(model, sizeof model, "%.399s", tmp_path("data/qwen2_chat"));
  CHECK(mkdir(model, 0755) == 0, "cannot create %s", model);
  make_model(model);
  const char *chat = write_chat("data/chat.jsonl", 0);

  char ids[2][80];
  for (int k = 0; k < 2; k++) {
    snprintf(ids[k], sizeof ids[k], "%s", td_submit(&t, td_jobfile_hf(k ? "chat2" : "chat1", model, chat, 6), NULL));
    td_wait_success(&t, ids[k], 300);
    td_logs(&t, ids[k], out, sizeof out);
    CHECK(strstr(out, "40 records") && strstr(out, "packed"), "job %s: the log does not say how the chat was read:\n%s",
          ids[k], out);
    CHECK(!k == !strstr(out, "from the cache"), "job %s: %s the cache:\n%s", ids[k], k ? "did not read" : "read",
          out);
  }
  printf("chat: two jobs trained; the second read its tokens from the cache\n");

  const char *dir = tmp_path("export");
  int rc = td_ctl(&t, out, sizeof out, "export %s %s", ids[0], dir);
  CHECK(rc == 0, "trainctl export exited %d:\n%s", rc, out);
  char a[700], b[700];
  static const char *const files[] = {"tokenizer.json", "tokenizer_config.json"};
  for (int i = 0; i < 2; i++) {
    snprintf(a, sizeof a, "%s/%s", dir, files[i]);
    snprintf(b, sizeof b, "%s/%s", model, files[i]);
    CHECK(same_file(a, b), "the export's %s differs from the model's", files[i]);
  }
  printf("chat: the export carries the tokenizer files\n");

  const char *bad = write_chat("data/bad.jsonl", 7);
  char msg[4096];
  int st = td_submit_outcome(&t, td_jobfile_hf("bad", model, bad, 6), msg, sizeof msg, 300);
  CHECK(st == TRAIND__V1__JOB_STATE__JOB_STATE_FAILED && strstr(msg, "bad.jsonl") && strstr(msg, "line 7") &&
            strstr(msg, "unknown role \"robot\""),
        "a bad record: state %d: %s", st, msg);
  printf("chat: a bad record fails its job: %s\n", msg);
  td_finish(&t);
  return 0;
}
