// engine/data refuses bad sources at open, with the code (ENG_EINVAL for bad
// content, ENG_EIO for unreadable files) and a message naming the file and
// the place: token position, line, field, value.
#define _POSIX_C_SOURCE 200809L // mkdtemp

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "data/data.h"

static char g_dir[64];
static char g_files[64][128];
static int g_nfiles;

static const char *tmp_path(const char *name) {
  CHECK(g_nfiles < 64, "too many temp files");
  char *p = g_files[g_nfiles++];
  snprintf(p, sizeof g_files[0], "%s/%s", g_dir, name);
  return p;
}

static const char *write_file(const char *name, const void *buf, size_t n) {
  const char *path = tmp_path(name);
  FILE *f = fopen(path, "wb");
  CHECK(f, "cannot create %s", path);
  CHECK(fwrite(buf, 1, n, f) == n, "short write to %s", path);
  CHECK(fclose(f) == 0, "cannot close %s", path);
  return path;
}

static const char *write_text(const char *name, const char *text) { return write_file(name, text, strlen(text)); }

// A shard whose header says (magic, version, count) and which holds `bytes`
// bytes of tokens after the header, token i being tok[i] (or 0 past n).
static const char *write_shard(const char *name, int32_t magic, int32_t version, int32_t count, size_t bytes,
                               const uint16_t *tok, size_t n) {
  unsigned char *buf = calloc(1, 1024 + bytes);
  int32_t head[3] = {magic, version, count};
  memcpy(buf, head, sizeof head);
  memcpy(buf + 1024, tok, n * sizeof *tok);
  const char *path = write_file(name, buf, 1024 + bytes);
  free(buf);
  return path;
}

// Opening path must fail with code and a message holding the path and every
// one of the NULL-terminated fragments.
static void expect_open_err(int line, const char *path, int seq_len, int vocab, int code, ...) {
  eng_err e = {0};
  eng_data *d = (eng_data *)&e; // must be reset to NULL
  int rc = eng_data_open(&d, NULL, path, seq_len, vocab, 1, 1, &e);
  CHECK(rc == code, "line %d: %s: code %d (%s), want %d: %s", line, path, rc, eng_err_name(rc), code, e.msg);
  CHECK(e.code == code, "line %d: eng_err holds code %d", line, e.code);
  CHECK(d == NULL, "line %d: *out not NULL after a failed open", line);
  CHECK(strstr(e.msg, path), "line %d: message does not name the file: %s", line, e.msg);
  va_list ap;
  va_start(ap, code);
  for (const char *frag; (frag = va_arg(ap, const char *));)
    CHECK(strstr(e.msg, frag), "line %d: message lacks \"%s\": %s", line, frag, e.msg);
  va_end(ap);
}
#define EXPECT_ERR(path, seq_len, vocab, code, ...) \
  expect_open_err(__LINE__, path, seq_len, vocab, code, __VA_ARGS__, (const char *)NULL)

static void test_arguments(void) {
  const char *path = write_text("args.txt", "some text that is long enough");
  EXPECT_ERR(path, 0, 256, ENG_EINVAL, "seq_len", "0");
  EXPECT_ERR(path, 4, 0, ENG_EINVAL, "vocab", "0");
  EXPECT_ERR(tmp_path("missing.txt"), 4, 256, ENG_EIO, "cannot open");
  EXPECT_ERR(tmp_path("missing.bin"), 4, 256, ENG_EIO, "cannot open");
  EXPECT_ERR(tmp_path("missing.jsonl"), 4, 256, ENG_EIO, "cannot open");
  EXPECT_ERR(g_dir, 4, 256, ENG_EIO, "not a regular file");
}

static void test_shards(void) {
  uint16_t tok[64];
  for (int i = 0; i < 64; i++) tok[i] = (uint16_t)i;
  EXPECT_ERR(write_file("empty.bin", "", 0), 4, 100, ENG_EINVAL, "empty");
  EXPECT_ERR(write_file("short.bin", tok, 100), 4, 100, ENG_EINVAL, "100 bytes", "1024-byte", "header");
  EXPECT_ERR(write_shard("magic.bin", 12345, 1, 64, 128, tok, 64), 4, 100, ENG_EINVAL, "magic", "12345");
  EXPECT_ERR(write_shard("version.bin", 20240520, 3, 64, 128, tok, 64), 4, 100, ENG_EINVAL, "version", "3");
  EXPECT_ERR(write_shard("trunc.bin", 20240520, 1, 64, 100, tok, 50), 4, 100, ENG_EINVAL, "truncated",
             "64 tokens", "100 bytes");
  EXPECT_ERR(write_shard("long.bin", 20240520, 1, 64, 130, tok, 64), 4, 100, ENG_EINVAL, "130 bytes",
             "64 tokens");
  EXPECT_ERR(write_shard("vocab.bin", 20240520, 1, 64, 128, tok, 64), 4, 50, ENG_EINVAL, "token 50", "is 50",
             "vocab 50");
  EXPECT_ERR(write_shard("few.bin", 20240520, 1, 64, 128, tok, 64), 65, 100, ENG_EINVAL, "64 tokens",
             "seq_len 65");
  EXPECT_ERR(write_shard("none.bin", 20240520, 2, 0, 0, tok, 0), 4, 100, ENG_EINVAL, "0 tokens", "seq_len 4");
  // Content decides for other extensions: a shard named .dat is still checked as one.
  EXPECT_ERR(write_shard("vocab.dat", 20240520, 1, 64, 128, tok, 64), 4, 60, ENG_EINVAL, "token 60", "vocab 60");
}

static void test_text(void) {
  const char *path = write_text("small-vocab.txt", "hello world");
  EXPECT_ERR(path, 4, 255, ENG_EINVAL, "vocab >= 256", "255");
  EXPECT_ERR(write_file("empty.txt", "", 0), 4, 256, ENG_EINVAL, "empty file");
  EXPECT_ERR(path, 12, 256, ENG_EINVAL, "11 tokens", "seq_len 12");
}

static void test_jsonl(void) {
  const char *ok = "{\"input_ids\": [1, 2]}\n";
  char buf[512];
#define JSONL_ERR(name, line3, ...)                                 \
  do {                                                              \
    snprintf(buf, sizeof buf, "%s\n%s%s\n%s", ok, ok, line3, ok);   \
    EXPECT_ERR(write_text(name, buf), 8, 10, ENG_EINVAL, __VA_ARGS__); \
  } while (0)
  // The bad record is on line 4: a record, a blank line, a record, then it.
  JSONL_ERR("invalid.jsonl", "{\"input_ids\": [1, 2", "line 4", "not valid JSON");
  JSONL_ERR("array.jsonl", "[1, 2, 3]", "line 4", "not a JSON object");
  JSONL_ERR("number.jsonl", "5", "line 4", "not a JSON object");
  JSONL_ERR("missing.jsonl", "{\"labels\": [1]}", "line 4", "\"input_ids\" is missing");
  JSONL_ERR("notarray.jsonl", "{\"input_ids\": \"1 2\"}", "line 4", "\"input_ids\" is not an array");
  JSONL_ERR("real.jsonl", "{\"input_ids\": [1, 2.5]}", "line 4", "input_ids[1] is not an integer");
  JSONL_ERR("string.jsonl", "{\"input_ids\": [\"a\"]}", "line 4", "input_ids[0] is not an integer");
  JSONL_ERR("bigid.jsonl", "{\"input_ids\": [1, 2, 10]}", "line 4", "input_ids[2] is 10", "vocab 10");
  JSONL_ERR("negid.jsonl", "{\"input_ids\": [-100]}", "line 4", "input_ids[0] is -100");
  JSONL_ERR("empty-rec.jsonl", "{\"input_ids\": []}", "line 4", "empty record");
  JSONL_ERR("labels-len.jsonl", "{\"input_ids\": [1, 2], \"labels\": [1]}", "line 4", "\"labels\" has 1",
            "\"input_ids\" has 2");
  JSONL_ERR("labels-type.jsonl", "{\"input_ids\": [1], \"labels\": 1}", "line 4", "\"labels\" is not an array");
  JSONL_ERR("labels-int.jsonl", "{\"input_ids\": [1], \"labels\": [null]}", "line 4",
            "labels[0] is not an integer");
  JSONL_ERR("labels-neg.jsonl", "{\"input_ids\": [1, 2], \"labels\": [1, -1]}", "line 4", "labels[1] is -1",
            "neither -100");
  JSONL_ERR("labels-big.jsonl", "{\"input_ids\": [1, 2], \"labels\": [10, 2]}", "line 4", "labels[0] is 10",
            "vocab 10");
  JSONL_ERR("dup.jsonl", "{\"input_ids\": [1], \"input_ids\": [2]}", "line 4", "not valid JSON");
#undef JSONL_ERR
  EXPECT_ERR(write_file("empty.jsonl", "", 0), 8, 10, ENG_EINVAL, "empty file");
  EXPECT_ERR(write_text("blank.jsonl", "\n  \n\r\n"), 8, 10, ENG_EINVAL, "no records");
}

static void test_position_and_batch(void) {
  const char *path = write_text("pos.txt", "0123456789abcdef"); // 4 windows of 4
  eng_err e = {0};
  eng_data *d;
  CHECK_OK(eng_data_open(&d, NULL, path, 4, 256, 3, 1, &e), &e);
  eng_data_pos before, bad = {.epoch = 0, .index = 4};
  eng_data_pos_get(d, &before);
  CHECK(eng_data_pos_set(d, &bad, &e) == ENG_EINVAL, "index past the epoch is refused");
  CHECK(strstr(e.msg, path) && strstr(e.msg, "index 4") && strstr(e.msg, "4 samples"), "message: %s", e.msg);
  eng_data_pos after;
  eng_data_pos_get(d, &after);
  CHECK(after.epoch == before.epoch && after.index == before.index, "a refused position changes nothing");
  int32_t ids[4], labels[4];
  CHECK(eng_data_next(d, 0, ids, labels, &e) == ENG_EINVAL, "batch 0 is refused");
  CHECK(strstr(e.msg, path) && strstr(e.msg, "batch"), "message: %s", e.msg);
  CHECK(eng_data_next(d, 1, NULL, labels, &e) == ENG_EINVAL, "a missing buffer is refused");
  eng_data_close(d);
}

int main(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/traind-test-data-errors-XXXXXX");
  CHECK(mkdtemp(g_dir), "mkdtemp failed");
  test_arguments();
  test_shards();
  test_text();
  test_jsonl();
  test_position_and_batch();
  for (int i = 0; i < g_nfiles; i++)
    CHECK(unlink(g_files[i]) == 0 || access(g_files[i], F_OK) != 0, "cannot remove %s", g_files[i]);
  CHECK(rmdir(g_dir) == 0, "cannot remove %s", g_dir);
  printf("test_data_errors: ok\n");
  return 0;
}
