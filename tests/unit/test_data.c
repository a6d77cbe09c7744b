// engine/data: token shards (uint16 and uint32), plain text through the byte
// tokenizer, JSONL records, window and label layout, the shuffled order and
// resuming from a saved position.
#define _POSIX_C_SOURCE 200809L // mkdtemp

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "read_all.h"
#include "common/rng.h"
#include "data/data.h"
#include "data/tokenizer.h"

static char g_dir[64];
static char g_files[16][128];
static int g_nfiles;

// A path in the test's temporary directory, remembered for removal.
static const char *tmp_path(const char *name) {
  CHECK(g_nfiles < 16, "too many temp files");
  char *p = g_files[g_nfiles++];
  snprintf(p, sizeof g_files[0], "%s/%s", g_dir, name);
  return p;
}

static void write_bytes(const char *path, const void *buf, size_t n) {
  FILE *f = fopen(path, "wb");
  CHECK(f, "cannot create %s", path);
  CHECK(fwrite(buf, 1, n, f) == n, "short write to %s", path);
  CHECK(fclose(f) == 0, "cannot close %s", path);
}

// An llm.c shard: version 1 stores uint16 tokens, version 2 uint32.
static const char *write_shard(const char *name, int version, const uint32_t *tok, uint32_t n) {
  const char *path = tmp_path(name);
  size_t w = version == 1 ? 2 : 4;
  unsigned char *buf = calloc(1, 1024 + n * w);
  int32_t head[3] = {20240520, version, (int32_t)n};
  memcpy(buf, head, sizeof head);
  for (uint32_t i = 0; i < n; i++) {
    if (version == 1) {
      uint16_t t = (uint16_t)tok[i];
      memcpy(buf + 1024 + 2 * i, &t, 2);
    } else {
      memcpy(buf + 1024 + 4 * i, &tok[i], 4);
    }
  }
  write_bytes(path, buf, 1024 + n * w);
  free(buf);
  return path;
}


// Windows of seq_len in file order, labels equal to ids, the tail dropped,
// then the next epoch starting over.
static void test_shard_roundtrip(int version) {
  enum { T = 16, W = 10, TAIL = 7, N = W * T + TAIL };
  int vocab = version == 1 ? 65536 : 200000;
  uint32_t tok[N];
  for (uint32_t i = 0; i < N; i++) tok[i] = (i * 7919u + 13u) % (uint32_t)vocab; // uint32 ones exceed 65535
  const char *path = write_shard(version == 1 ? "u16.bin" : "u32.bin", version, tok, N);
  eng_err e = {0};
  eng_data *d;
  CHECK_OK(eng_data_open(&d, NULL, path, T, vocab, 1, 0, &e), &e);
  CHECK(eng_data_samples(d) == W, "samples %llu", (unsigned long long)eng_data_samples(d));
  CHECK(eng_data_tokens(d) == N, "tokens %llu", (unsigned long long)eng_data_tokens(d));
  int32_t ids[W * T], labels[W * T];
  CHECK_OK(eng_data_next(d, W, ids, labels, &e), &e);
  for (int i = 0; i < W * T; i++) {
    CHECK(ids[i] == (int32_t)tok[i], "v%d id %d: %d != %u", version, i, ids[i], tok[i]);
    CHECK(labels[i] == ids[i], "v%d label %d not aligned with its id", version, i);
  }
  eng_data_pos p;
  eng_data_pos_get(d, &p);
  CHECK(p.epoch == 1 && p.index == 0, "after one epoch: (%llu, %llu)", (unsigned long long)p.epoch,
        (unsigned long long)p.index);
  CHECK_OK(eng_data_next(d, 1, ids, labels, &e), &e);
  CHECK(ids[0] == (int32_t)tok[0] && ids[T - 1] == (int32_t)tok[T - 1], "epoch 1 restarts at window 0");
  eng_data_close(d);
}

// Text is cut into windows of bytes; a batch larger than an epoch wraps.
static void test_text_windows(void) {
  const char *path = tmp_path("abc.txt");
  const char *text = "abcdefghijklmnopqrstuvwxyz"; // 26 bytes: 6 windows of 4, tail "yz" dropped
  write_bytes(path, text, strlen(text));
  eng_err e = {0};
  eng_data *d;
  CHECK_OK(eng_data_open(&d, NULL, path, 4, 300, 0, 0, &e), &e);
  CHECK(eng_data_samples(d) == 6 && eng_data_tokens(d) == 26, "6 windows of 26 bytes");
  int32_t ids[8 * 4], labels[8 * 4];
  CHECK_OK(eng_data_next(d, 8, ids, labels, &e), &e);
  for (int s = 0; s < 8; s++)
    for (int t = 0; t < 4; t++) {
      int want = text[(s % 6) * 4 + t];
      CHECK(ids[s * 4 + t] == want && labels[s * 4 + t] == want, "sample %d token %d: %d", s, t, ids[s * 4 + t]);
    }
  eng_data_pos p;
  eng_data_pos_get(d, &p);
  CHECK(p.epoch == 1 && p.index == 2, "8 samples of 6 per epoch end at (1, 2)");
  eng_data_close(d);
}

// A shard of W windows whose tokens all equal the window's index, so a
// sample's first id says which window it is.
enum { SH_T = 8, SH_W = 50 };
static const char *write_indexed_shard(void) {
  static uint32_t tok[SH_W * SH_T + 3];
  for (uint32_t i = 0; i < SH_W * SH_T + 3; i++) tok[i] = i / SH_T;
  return write_shard("indexed.bin", 2, tok, SH_W * SH_T + 3);
}

// The window indices of the next n samples.
static void draw(eng_data *d, int n, int *out) {
  int32_t ids[SH_T], labels[SH_T];
  eng_err e = {0};
  for (int i = 0; i < n; i++) {
    CHECK_OK(eng_data_next(d, 1, ids, labels, &e), &e);
    out[i] = ids[0];
  }
}

static void test_shuffle(const char *path) {
  eng_err e = {0};
  eng_data *a, *b, *c;
  CHECK_OK(eng_data_open(&a, NULL, path, SH_T, 64, 42, 1, &e), &e);
  CHECK_OK(eng_data_open(&b, NULL, path, SH_T, 64, 42, 1, &e), &e);
  CHECK_OK(eng_data_open(&c, NULL, path, SH_T, 64, 43, 1, &e), &e);
  int oa[3 * SH_W], ob[3 * SH_W], oc[SH_W];
  draw(a, 3 * SH_W, oa);
  draw(b, 3 * SH_W, ob);
  draw(c, SH_W, oc);
  CHECK(memcmp(oa, ob, sizeof oa) == 0, "same seed, same order over three epochs");
  CHECK(memcmp(oa, oc, sizeof oc) != 0, "another seed gives another order");
  CHECK(memcmp(oa, oa + SH_W, SH_W * sizeof *oa) != 0, "epochs 0 and 1 differ");
  CHECK(memcmp(oa + SH_W, oa + 2 * SH_W, SH_W * sizeof *oa) != 0, "epochs 1 and 2 differ");
  int identity = 1;
  for (int epoch = 0; epoch < 3; epoch++) {
    int seen[SH_W] = {0};
    for (int i = 0; i < SH_W; i++) seen[oa[epoch * SH_W + i]]++;
    for (int w = 0; w < SH_W; w++) CHECK(seen[w] == 1, "epoch %d visits window %d %d times", epoch, w, seen[w]);
  }
  for (int i = 0; i < SH_W; i++) identity &= oa[i] == i;
  CHECK(!identity, "shuffled order is not file order");
  // The documented order: Fisher-Yates from eng_rng_seed(seed, ENG_DATA_RNG_STREAM + epoch).
  for (uint64_t epoch = 0; epoch < 3; epoch++) {
    uint32_t perm[SH_W];
    for (uint32_t i = 0; i < SH_W; i++) perm[i] = i;
    eng_rng r;
    eng_rng_seed(&r, 42, ENG_DATA_RNG_STREAM + epoch);
    eng_rng_shuffle_u32(&r, perm, SH_W);
    for (int i = 0; i < SH_W; i++)
      CHECK(oa[epoch * SH_W + i] == (int)perm[i], "epoch %llu sample %d follows the documented permutation",
            (unsigned long long)epoch, i);
  }
  eng_data_close(a);
  eng_data_close(b);
  eng_data_close(c);
}

// After k batches, a fresh data set moved to the saved position serves the
// same batches as the original, across an epoch boundary.
static void test_resume(const char *path) {
  enum { B = 4, K = 17, M = 20 };
  eng_err e = {0};
  eng_data *d, *r;
  CHECK_OK(eng_data_open(&d, NULL, path, SH_T, 64, 7, 1, &e), &e);
  static int32_t ids[B * SH_T], labels[B * SH_T], want_ids[M][B * SH_T], want_labels[M][B * SH_T];
  for (int k = 0; k < K; k++) CHECK_OK(eng_data_next(d, B, ids, labels, &e), &e);
  eng_data_pos p;
  eng_data_pos_get(d, &p);
  CHECK(p.epoch == 1 && p.index == (uint64_t)(K * B - SH_W), "position after %d samples", K * B);
  for (int m = 0; m < M; m++) CHECK_OK(eng_data_next(d, B, want_ids[m], want_labels[m], &e), &e);

  CHECK_OK(eng_data_open(&r, NULL, path, SH_T, 64, 7, 1, &e), &e);
  CHECK_OK(eng_data_pos_set(r, &p, &e), &e);
  for (int m = 0; m < M; m++) {
    CHECK_OK(eng_data_next(r, B, ids, labels, &e), &e);
    CHECK(memcmp(ids, want_ids[m], sizeof ids) == 0 && memcmp(labels, want_labels[m], sizeof labels) == 0,
          "resumed batch %d differs", m);
  }
  // Moving back within the same object also replays (the order of that epoch is rebuilt).
  CHECK_OK(eng_data_pos_set(d, &p, &e), &e);
  CHECK_OK(eng_data_next(d, B, ids, labels, &e), &e);
  CHECK(memcmp(ids, want_ids[0], sizeof ids) == 0, "rewinding the same data set replays");
  eng_data_close(d);
  eng_data_close(r);
}

// Records padded (id 0, label -100) or truncated to seq_len, labels given or
// copied from input_ids, blank lines skipped, CRLF and a last line without
// newline accepted, file order kept without shuffle.
static void test_jsonl(void) {
  const char *path = tmp_path("sft.jsonl");
  const char *text = "{\"input_ids\": [1, 2, 3]}\n"
                     "{\"input_ids\": [4, 5, 6, 7, 8, 9, 10], \"labels\": [-100, -100, 6, 7, 8, 9, 10]}\r\n"
                     "\n"
                     "   \n"
                     "{\"input_ids\": [11, 12, 13, 14, 15], \"labels\": [11, -100, 13, -100, 15], \"attention_mask\": "
                     "[1, 1, 1, 1, 1]}";
  write_bytes(path, text, strlen(text));
  eng_err e = {0};
  eng_data *d;
  CHECK_OK(eng_data_open(&d, NULL, path, 5, 16, 0, 0, &e), &e);
  CHECK(eng_data_samples(d) == 3, "3 records, got %llu", (unsigned long long)eng_data_samples(d));
  CHECK(eng_data_tokens(d) == 15, "15 input tokens before truncation, got %llu",
        (unsigned long long)eng_data_tokens(d));
  int32_t ids[4 * 5], labels[4 * 5];
  CHECK_OK(eng_data_next(d, 4, ids, labels, &e), &e);
  const int32_t want_ids[4 * 5] = {1, 2, 3, 0, 0, 4, 5, 6, 7, 8, 11, 12, 13, 14, 15, 1, 2, 3, 0, 0};
  const int32_t want_labels[4 * 5] = {1,  2,    3,  -100, -100, -100, -100, 6, 7,    8,
                                      11, -100, 13, -100, 15,   1,    2,    3, -100, -100};
  for (int i = 0; i < 4 * 5; i++) {
    CHECK(ids[i] == want_ids[i], "ids[%d] = %d, want %d", i, ids[i], want_ids[i]);
    CHECK(labels[i] == want_labels[i], "labels[%d] = %d, want %d", i, labels[i], want_labels[i]);
  }
  eng_data_close(d);

  // Shuffled records keep their ids and labels together.
  CHECK_OK(eng_data_open(&d, NULL, path, 5, 16, 9, 1, &e), &e);
  CHECK_OK(eng_data_next(d, 3, ids, labels, &e), &e);
  int seen = 0;
  for (int s = 0; s < 3; s++) {
    int r = ids[s * 5] == 1 ? 0 : ids[s * 5] == 4 ? 1 : 2;
    seen |= 1 << r;
    CHECK(memcmp(ids + s * 5, want_ids + r * 5, 5 * sizeof *ids) == 0, "shuffled sample %d ids", s);
    CHECK(memcmp(labels + s * 5, want_labels + r * 5, 5 * sizeof *labels) == 0, "shuffled sample %d labels", s);
  }
  CHECK(seen == 7, "every record once per epoch");
  eng_data_close(d);
}

// Enough records to grow the record arrays several times (ids of record r
// are r + k mod vocab, r % 13 + 1 of them; seq_len 8 truncates the longer).
static void test_jsonl_many(void) {
  enum { R = 3000, T = 8, V = 97 };
  const char *path = tmp_path("many.jsonl");
  FILE *f = fopen(path, "w");
  CHECK(f, "cannot create %s", path);
  uint64_t total = 0;
  for (int r = 0; r < R; r++) {
    int n = r % 13 + 1;
    total += (uint64_t)n;
    fprintf(f, "{\"input_ids\": [");
    for (int k = 0; k < n; k++) fprintf(f, "%s%d", k ? ", " : "", (r + k) % V);
    fprintf(f, "]}\n");
  }
  CHECK(fclose(f) == 0, "cannot close %s", path);
  eng_err e = {0};
  eng_data *d;
  CHECK_OK(eng_data_open(&d, NULL, path, T, V, 0, 0, &e), &e);
  CHECK(eng_data_samples(d) == R && eng_data_tokens(d) == total, "records and tokens of many.jsonl");
  int32_t ids[T], labels[T];
  for (int r = 0; r < R; r++) {
    CHECK_OK(eng_data_next(d, 1, ids, labels, &e), &e);
    int n = r % 13 + 1;
    for (int t = 0; t < T; t++) {
      int32_t want = t < n ? (r + t) % V : 0, want_label = t < n ? want : ENG_DATA_IGNORE;
      CHECK(ids[t] == want && labels[t] == want_label, "record %d token %d: %d/%d", r, t, ids[t], labels[t]);
    }
  }
  eng_data_close(d);
}

// The demo text through the byte tokenizer: samples are the file's bytes,
// encode/decode round-trip, and the eval text is held out of the training text.
static void test_demo_text(void) {
  const char *train = TRAIND_SOURCE_DIR "/data/demo/licenses.txt";
  const char *eval = TRAIND_SOURCE_DIR "/data/demo/eval.txt";
  size_t n, ne;
  char *text = read_all(train, &n);
  char *etext = read_all(eval, &ne);
  CHECK(n >= 150 * 1000 && n <= 400 * 1000, "licenses.txt is %zu bytes", n);
  CHECK(ne > 0 && ne < n, "eval.txt is %zu bytes", ne);

  enum { T = 64 };
  eng_err e = {0};
  eng_data *d;
  CHECK_OK(eng_data_open(&d, NULL, train, T, ENG_TOK_BYTE_VOCAB, 0, 0, &e), &e);
  CHECK(eng_data_tokens(d) == n && eng_data_samples(d) == n / T, "tokens and windows of the demo text");
  int32_t ids[2 * T], labels[2 * T];
  CHECK_OK(eng_data_next(d, 2, ids, labels, &e), &e);
  char out[2 * T + 1];
  CHECK(eng_tok_byte_decode(ids, 2 * T, out) == 0, "demo text decodes without replacements");
  CHECK(memcmp(out, text, 2 * T) == 0, "the first two samples are the first %d bytes", 2 * T);
  eng_data_close(d);

  int32_t *all = malloc(n * sizeof *all);
  char *back = malloc(n + 1);
  eng_tok_byte_encode((const uint8_t *)text, n, all);
  CHECK(eng_tok_byte_decode(all, n, back) == 0 && memcmp(back, text, n) == 0, "encode/decode round trip");
  free(all);
  free(back);

  const int32_t odd[4] = {-100, 256, 'O', 'K'};
  char odd_out[5];
  CHECK(eng_tok_byte_decode(odd, 4, odd_out) == 2 && strcmp(odd_out, "??OK") == 0, "non-byte ids become '?'");

  CHECK_OK(eng_data_open(&d, NULL, eval, T, 512, 0, 0, &e), &e);
  CHECK(eng_data_tokens(d) == ne, "eval tokens");
  eng_data_close(d);
  // Held out: no 200-byte stretch of the eval text (sampled every 1000 bytes) occurs in the training text.
  for (size_t at = 0; at + 200 <= ne; at += 1000) {
    char probe[201];
    memcpy(probe, etext + at, 200);
    probe[200] = '\0';
    CHECK(strstr(text, probe) == NULL, "eval.txt bytes %zu.. occur in licenses.txt", at);
  }
  free(text);
  free(etext);
}

int main(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/traind-test-data-XXXXXX");
  CHECK(mkdtemp(g_dir), "mkdtemp failed");
  test_shard_roundtrip(1);
  test_shard_roundtrip(2);
  test_text_windows();
  const char *indexed = write_indexed_shard();
  test_shuffle(indexed);
  test_resume(indexed);
  test_jsonl();
  test_jsonl_many();
  test_demo_text();
  for (int i = 0; i < g_nfiles; i++) CHECK(unlink(g_files[i]) == 0, "cannot remove %s", g_files[i]);
  CHECK(rmdir(g_dir) == 0, "cannot remove %s", g_dir);
  printf("test_data: ok\n");
  return 0;
}
