// A job's errors never carry a file's bytes, and paths it may not read all
// get one answer, through a real daemon:
// - a .jsonl data file, a config.json and a safetensors header that are not
//   valid JSON fail naming the file and the place (line, column, byte), and
//   quote none of the content (jansson's own message would: "invalid token
//   near 'hunter2'"); a config.json field with an unknown value is named,
//   its value is not;
// - config.json linked to a secret outside the roots gets the one answer;
// - a train_path outside the roots (present or absent), absent inside them,
//   or linked out of them: the same message, but for the path itself.
#define _GNU_SOURCE
#include "e2e/daemon.h"
#include "fixture.h"

#define NOT_THERE "not found under the data roots or not readable"
#define FAILED TRAIND__V1__JOB_STATE__JOB_STATE_FAILED
#define SECRET "hunter2:$6$saltsalt$hash:19000:0:99999:7:::\n"

static td t;
static char msg[8192];

// The job is refused or fails, naming what, and no byte of SECRET shows.
static void expect_clean(const char *what, const char *jobfile, const char *names, const char *place) {
  int st = td_submit_outcome(&t, jobfile, msg, sizeof msg, 300);
  CHECK(st == -1 || st == FAILED, "%s: the job ended in state %d: %s", what, st, msg);
  CHECK(strstr(msg, names) && strstr(msg, place), "%s: the error does not name %s and %s: %s", what, names, place, msg);
  CHECK(!strstr(msg, "hunter") && !strstr(msg, "saltsalt") && !strstr(msg, "near '"),
        "%s: the error quotes the file: %s", what, msg);
  printf("%s: %s: %s%s", what, st == -1 ? "refused" : "failed", msg, st == -1 ? "" : "\n");
}

// The refusal of train_path = path, with path itself cut out.
static void refusal_without(const char *path, char *out, size_t n) {
  int st = td_submit_outcome(&t, td_jobfile_hf("one", fx_dir("qwen3"), path, 2), msg, sizeof msg, 300);
  CHECK(st == -1, "train_path %s: not refused (state %d): %s", path, st, msg);
  char *at = strstr(msg, path);
  CHECK(at && strstr(msg, NOT_THERE), "train_path %s: %s", path, msg);
  snprintf(out, n, "%.*s<path>%s", (int)(at - msg), msg, at + strlen(path));
}

int main(void) {
  td_init(&t);
  td_root_fixtures(&t);
  td_start(&t);
  const char *qwen3 = fx_dir("qwen3");
  char secret[600];
  snprintf(secret, sizeof secret, "%s", tmp_path("secret"));
  td_write(secret, SECRET, strlen(SECRET));

  const char *jsonl = tmp_path("data/records.jsonl");
  td_write(jsonl, SECRET, strlen(SECRET));
  expect_clean("jsonl data", td_jobfile_hf("jsonl", qwen3, jsonl, 2), "records.jsonl: line 1", "not valid JSON at column");

  char dir[600];
  snprintf(dir, sizeof dir, "%s", tmp_path("data/badcfg"));
  td_sh("mkdir -p %s && cp %s/model.safetensors %s/", dir, qwen3, dir);
  td_write(tmp_path("data/badcfg/config.json"), SECRET, strlen(SECRET));
  expect_clean("config.json", td_jobfile_hf("badcfg", dir, NULL, 2), "config.json", "not valid JSON at line 1");

  // Valid JSON whose value is the secret: the field is named, not its value.
  const char *typed = "{\"model_type\": \"hunter2:$6$saltsalt\"}";
  td_write(tmp_path("data/badcfg/config.json"), typed, strlen(typed));
  expect_clean("config.json model_type", td_jobfile_hf("badtype", dir, NULL, 2), "config.json", "\"model_type\"");

  snprintf(dir, sizeof dir, "%s", tmp_path("data/linkcfg"));
  td_sh("mkdir -p %s && cp %s/model.safetensors %s/ && ln -s %s %s/config.json", dir, qwen3, dir, secret, dir);
  expect_clean("config.json linked outside", td_jobfile_hf("linkcfg", dir, NULL, 2), "config.json", NOT_THERE);

  // A safetensors header: 8 bytes of length, then the secret as its JSON.
  snprintf(dir, sizeof dir, "%s", tmp_path("data/badst"));
  td_sh("mkdir -p %s && cp %s/config.json %s/", dir, qwen3, dir);
  unsigned char st[8 + sizeof SECRET] = {(unsigned char)strlen(SECRET)};
  memcpy(st + 8, SECRET, strlen(SECRET));
  td_write(tmp_path("data/badst/model.safetensors"), st, 8 + strlen(SECRET));
  expect_clean("safetensors header", td_jobfile_hf("badst", dir, NULL, 2), "model.safetensors", "header is not valid JSON at byte");

  // One answer: outside and present, outside and absent, inside and absent,
  // inside but linked outside.
  char link[600], first[8192], other[8192];
  snprintf(link, sizeof link, "%s", tmp_path("data/link.txt"));
  CHECK(symlink(secret, link) == 0, "symlink %s", link);
  const char *paths[] = {secret, tmp_path("absent.txt"), tmp_path("data/absent.txt"), link};
  refusal_without(paths[0], first, sizeof first);
  for (int i = 1; i < 4; i++) {
    refusal_without(paths[i], other, sizeof other);
    CHECK(!strcmp(first, other), "two answers for paths it may not read:\n%s\n%s", first, other);
  }
  printf("one answer for 4 paths it may not read: %s", first);
  td_finish(&t);
  return 0;
}
