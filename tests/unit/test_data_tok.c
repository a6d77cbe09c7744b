// engine/data with a Hugging Face tokenizer (tests/fixtures/tok/llama3, its
// Llama-3 chat template): text and JSONL text become one stream with a BOS
// and an EOS per document; chat records (messages, prompt/completion pairs)
// become records whose labels are the assistant tokens, packed several to a
// sample with positions restarting per record; the tokenize-once cache gives
// the same samples and survives a damaged file; and bad data is refused
// naming the file, the line and the field.
#define _XOPEN_SOURCE 700

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "check.h"
#include "data/data.h"
#include "tmpdir.h"
#include "tok/chat.h"
#include "tok_fixture.h"

static eng_tok *g_tok;
static eng_tok_enc *g_enc;
static eng_chat g_chat;
static int32_t g_bos, g_eos;

static const char *write_text(const char *name, const char *text) {
  const char *path = tmp_path(name);
  FILE *f = fopen(path, "wb");
  CHECK(f && fwrite(text, 1, strlen(text), f) == strlen(text) && fclose(f) == 0, "cannot write %s", path);
  return path;
}

static eng_data_opts opts(int seq_len, int pack) {
  return (eng_data_opts){.seq_len = seq_len, .vocab = eng_tok_vocab(g_tok), .seed = 3, .format = ENG_DATA_AUTO,
                         .tok = g_tok, .chat = &g_chat, .eos = g_eos, .pack = pack};
}

// ids of text, without the template
static size_t enc(const char *text, int32_t *out) {
  eng_tok_ids v = {0};
  eng_err e = {0};
  CHECK_OK(eng_tok_encode(g_enc, text, strlen(text), 0, &v, &e), &e);
  memcpy(out, v.ids, v.n * sizeof *out);
  size_t n = v.n;
  eng_tok_ids_free(&v);
  return n;
}

// Both documents: BOS, the text, EOS, one after the other.
static void test_text(void) {
  eng_err e = {0};
  int32_t want[256];
  size_t n = 0;
  const char *docs[2] = {"Hello world, this is traind.", "A second document: 12345 and 你好."};
  for (int i = 0; i < 2; i++) {
    want[n++] = g_bos;
    n += enc(docs[i], want + n);
    want[n++] = g_eos;
  }
  const char *path = write_text("docs.jsonl", "{\"text\": \"Hello world, this is traind.\"}\n\n{\"text\": \"A second "
                                              "document: 12345 and \\u4f60\\u597d.\"}\n");
  {
    eng_data *d;
    eng_data_opts o = opts(4, 0);
    o.shuffle = 0;
    CHECK_OK(eng_data_open_opts(&d, NULL, path, &o, &e), &e);
    CHECK(eng_data_tokens(d) == n, "%s: %llu tokens, want %zu", path, (unsigned long long)eng_data_tokens(d), n);
    CHECK(eng_data_samples(d) == n / 4, "samples");
    int32_t ids[4], labels[4];
    for (size_t s = 0; s < n / 4; s++) {
      CHECK_OK(eng_data_next(d, 1, ids, labels, &e), &e);
      for (int t = 0; t < 4; t++) CHECK(ids[t] == want[4 * s + (size_t)t] && labels[t] == ids[t], "token %zu", 4 * s + t);
    }
    eng_data_close(d);
  }
  // A plain text file is one document.
  eng_data *d;
  eng_data_opts o = opts(2, 0);
  o.shuffle = 0;
  CHECK_OK(eng_data_open_opts(&d, NULL, write_text("doc.txt", docs[0]), &o, &e), &e);
  size_t m = 1 + enc(docs[0], want + 1) + 1;
  CHECK(eng_data_tokens(d) == m, "plain text: %llu tokens, want %zu", (unsigned long long)eng_data_tokens(d), m);
  eng_data_close(d);
  printf("text: %zu tokens over two documents\n", n);
}

static const char CHAT[] =
    "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \"Hello!\"}]}\n"
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"Name a "
    "prime.\"}, {\"role\": \"assistant\", \"content\": \"7\"}, {\"role\": \"user\", \"content\": \"Another?\"}, "
    "{\"role\": \"assistant\", \"content\": \"11, and 13 too.\"}]}\n"
    "{\"prompt\": \"2 + 2 =\", \"completion\": \" 4\"}\n"
    "{\"prompt\": [{\"role\": \"user\", \"content\": \"Say yes.\"}], \"completion\": [{\"role\": \"assistant\", "
    "\"content\": \"Yes.\"}]}\n"
    "{\"messages\": [{\"role\": \"user\", \"content\": \"Count to five.\"}, {\"role\": \"assistant\", \"content\": "
    "\"One, two, three, four, five.\"}]}\n";

// The records as one per sample (unpacked), to compare the packing with.
static void test_chat(void) {
  eng_err e = {0};
  const char *path = write_text("chat.jsonl", CHAT);
  enum { T = 64, R = 5 };
  eng_data *one, *packed;
  eng_data_opts o = opts(T, 0);
  o.shuffle = 0;
  CHECK_OK(eng_data_open_opts(&one, NULL, path, &o, &e), &e);
  CHECK(eng_data_samples(one) == R && !eng_data_packed(one), "unpacked: %llu samples",
        (unsigned long long)eng_data_samples(one));
  int32_t rid[R][T], rlab[R][T], rlen[R];
  size_t counted = 0;
  for (int r = 0; r < R; r++) {
    CHECK_OK(eng_data_next(one, 1, rid[r], rlab[r], &e), &e);
    rlen[r] = T;
    while (rlen[r] > 0 && rid[r][rlen[r] - 1] == 0 && rlab[r][rlen[r] - 1] == ENG_DATA_IGNORE) rlen[r]--;
    int n_counted = 0;
    for (int t = 1; t < rlen[r]; t++) n_counted += rlab[r][t] != ENG_DATA_IGNORE;
    CHECK(n_counted > 0 && rlab[r][0] == ENG_DATA_IGNORE, "record %d: %d counted labels", r, n_counted);
    // Counted labels are the token itself, and only after the prompt.
    for (int t = 0; t < rlen[r]; t++) CHECK(rlab[r][t] == ENG_DATA_IGNORE || rlab[r][t] == rid[r][t], "label");
    counted += (size_t)n_counted;
  }
  // The string pair: the prompt with a BOS, uncounted; " 4" and the EOS counted.
  int32_t p[16];
  size_t np = enc("2 + 2 =", p);
  CHECK(rid[2][0] == g_bos && rlab[2][(int)np] == ENG_DATA_IGNORE && rlab[2][(int)np + 1] == rid[2][(int)np + 1] &&
            rid[2][rlen[2] - 1] == g_eos && rlab[2][rlen[2] - 1] == g_eos,
        "prompt/completion labels");
  eng_data_close(one);

  o.pack = 1;
  CHECK_OK(eng_data_open_opts(&packed, NULL, path, &o, &e), &e);
  CHECK(eng_data_packed(packed) && eng_data_samples(packed) < R, "packed into %llu samples",
        (unsigned long long)eng_data_samples(packed));
  CHECK(eng_data_next(packed, 1, rid[0], rlab[0], &e) == ENG_EINVAL && strstr(e.msg, "positions"),
        "packed data read without positions: %s", e.msg);
  eng_data_close(packed);
  CHECK_OK(eng_data_open_opts(&packed, NULL, path, &o, &e), &e);
  // Every record appears whole, exactly once, positions from 0.
  int seen = 0, used[R] = {0};
  size_t counted_packed = 0;
  for (uint64_t s = 0; s < eng_data_samples(packed); s++) {
    int32_t ids[T], lab[T], pos[T];
    uint64_t which;
    CHECK_OK(eng_data_next_samples(packed, 1, ids, lab, pos, &which, &e), &e);
    int t = 0;
    for (;;) {
      int r = 0;
      while (r < R && (used[r] || t + rlen[r] > T || memcmp(ids + t, rid[r], (size_t)rlen[r] * 4) != 0)) r++;
      if (r == R) break;
      for (int i = 0; i < rlen[r]; i++) {
        CHECK(pos[t + i] == i, "sample %llu: position %d of record %d is %d", (unsigned long long)s, i, r,
              pos[t + i]);
        CHECK(lab[t + i] == (i ? rlab[r][i] : ENG_DATA_IGNORE), "label");
        counted_packed += i && lab[t + i] != ENG_DATA_IGNORE;
      }
      used[r] = 1;
      seen++;
      t += rlen[r];
    }
    CHECK(t > 0, "sample %llu starts with no record", (unsigned long long)s);
    for (int i = t; i < T; i++) CHECK(lab[i] == ENG_DATA_IGNORE && ids[i] == 0, "padding");
  }
  CHECK(seen == R && counted_packed == counted, "packing lost records or labels: %d records, %zu of %zu labels",
        seen, counted_packed, counted);
  printf("chat: %d records, %zu counted tokens, packed into %llu samples of %d: %s\n", R, counted,
         (unsigned long long)eng_data_samples(packed), T, eng_data_summary(packed));
  eng_data_close(packed);
}

static void test_cache(void) {
  eng_err e = {0};
  const char *path = write_text("cached.jsonl", CHAT), *dir = tmp_path("cache");
  eng_data_opts o = opts(32, 1);
  o.cache_dir = dir;
  int32_t a[2][4][32], b[4][32], pos[4][32];
  for (int run = 0; run < 3; run++) {
    eng_data *d;
    CHECK_OK(eng_data_open_opts(&d, NULL, path, &o, &e), &e);
    int hit = strstr(eng_data_summary(d), "from the cache") != NULL;
    CHECK(hit == (run == 1), "run %d: cache %s: %s", run, hit ? "hit" : "missed", eng_data_summary(d));
    CHECK_OK(eng_data_next_samples(d, 4, a[run > 0][0], b[0], pos[0], NULL, &e), &e);
    if (run) CHECK(memcmp(a[0], a[1], sizeof a[0]) == 0, "run %d: other samples than the first", run);
    eng_data_close(d);
    if (run == 1) {
      // Damage the cache file: the next open tokenizes again.
      char cmd[700];
      snprintf(cmd, sizeof cmd, "for f in %s/*.tok; do printf 'XX' | dd of=$f bs=1 seek=60 conv=notrunc 2>/dev/null; done", dir);
      CHECK(system(cmd) == 0, "cannot damage the cache");
    }
  }
  printf("cache: a hit gives the same samples; a damaged file is tokenized again\n");
}

// A file over a megabyte is tokenized by every thread, a block of lines
// each: the same samples as one thread, and the first bad line of the file
// named, wherever its block is.
static void test_threads(void) {
  eng_err e = {0};
  const char *path = tmp_path("big.jsonl"), *bad_path = tmp_path("bigbad.jsonl");
  FILE *f = fopen(path, "w"), *g = fopen(bad_path, "w");
  size_t lines = 0;
  while (ftell(f) < (3 << 19)) {
    fputs(CHAT, f);
    fputs(CHAT, g);
    lines += 5;
  }
  fprintf(g, "{\"messages\": [{\"role\": \"user\", \"content\": 1}]}\n");
  fclose(f);
  fclose(g);
  eng_data_opts o = opts(64, 1);
  o.shuffle = 0;
  enum { B = 64 };
  static int32_t ids[2][B * 64], lab[2][B * 64], pos[2][B * 64];
  uint64_t samples[2];
  for (int k = 0; k < 2; k++) {
    omp_set_num_threads(k + 1);
    eng_data *d;
    CHECK_OK(eng_data_open_opts(&d, NULL, path, &o, &e), &e);
    samples[k] = eng_data_samples(d);
    CHECK_OK(eng_data_next_samples(d, B, ids[k], lab[k], pos[k], NULL, &e), &e);
    eng_data_close(d);
    CHECK(eng_data_open_opts(&d, NULL, bad_path, &o, &e) == ENG_EINVAL, "the bad file opened");
    char want[64];
    snprintf(want, sizeof want, "line %zu: messages[0]", lines + 1);
    CHECK(strstr(e.msg, want), "%d threads: %s, want %s", k + 1, e.msg, want);
  }
  omp_set_num_threads(2);
  CHECK(samples[0] == samples[1] && !memcmp(ids[0], ids[1], sizeof ids[0]) && !memcmp(lab[0], lab[1], sizeof lab[0]) &&
            !memcmp(pos[0], pos[1], sizeof pos[0]),
        "two threads tokenized otherwise than one");
  printf("threads: %zu lines, one and two threads give the same %llu samples\n", lines, (unsigned long long)samples[0]);
}

// Opening text as path must fail naming the path, the line and what.
static void bad(const char *name, const char *text, eng_data_opts o, const char *line, const char *what) {
  eng_err e = {0};
  eng_data *d;
  const char *path = write_text(name, text);
  int rc = eng_data_open_opts(&d, NULL, path, &o, &e);
  CHECK(rc == ENG_EINVAL && d == NULL, "%s: rc %d: %s", name, rc, e.msg);
  CHECK(strstr(e.msg, path) && (!line || strstr(e.msg, line)) && strstr(e.msg, what), "%s: message \"%s\" lacks %s / %s",
        name, e.msg, line ? line : "", what);
  printf("refused: %s\n", e.msg);
}

static void test_errors(void) {
  eng_data_opts o = opts(32, 1);
  const char ok[] = "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}]}\n";
  char buf[1024];
  snprintf(buf, sizeof buf, "%s%s{\"messages\": [{\"role\": \"user\"}]}\n", ok, ok);
  bad("nocontent.jsonl", buf, o, "line 3", "messages[0]: field \"content\" is missing");
  snprintf(buf, sizeof buf, "%s{\"messages\": [{\"role\": \"wizard\", \"content\": \"x\"}]}\n", ok);
  bad("role.jsonl", buf, o, "line 2", "unknown role \"wizard\"");
  snprintf(buf, sizeof buf, "%s{\"messages\": [{\"role\": \"user\", \"content\": 7}]}\n", ok);
  bad("content-type.jsonl", buf, o, "line 2", "field \"content\" is an integer, not a string");
  snprintf(buf, sizeof buf, "%s{\"messages\": [{\"role\": \"user\", \"content\": \"only a question\"}]}\n", ok);
  bad("noassistant.jsonl", buf, o, "line 2", "no assistant message");
  snprintf(buf, sizeof buf, "%s{\"prompt\": \"q\"}\n", ok);
  bad("nocompletion.jsonl", buf, o, "line 2", "field \"completion\" is missing");
  bad("badutf8.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"caf\xe9\"}]}\n", o, "line 1", "invalid UTF-8");
  bad("text-type.jsonl", "{\"text\": \"fine\"}\n{\"text\": 5}\n", o, "line 2", "field \"text\" is an integer, not a string");
  bad("badutf8.txt", "line one\nline \xff two\n", o, "line 2", "invalid UTF-8 at byte 14");
  eng_chat unknown;
  eng_err e = {0};
  CHECK_OK(eng_chat_from_template(&unknown, "{% for m in messages %}{{ m.content }}{% endfor %}", NULL, NULL, NULL, &e), &e);
  eng_data_opts u = o;
  u.chat = &unknown;
  bad("template.jsonl", ok, u, "line 1", "chat template is not recognised: neither ChatML");
  eng_chat_free(&unknown);
  eng_data_opts small = o;
  small.vocab = 300;
  bad("vocab.jsonl", ok, small, "line 1", "past the model's vocab 300");
  eng_data_opts none = o;
  none.tok = NULL;
  bad("notok.jsonl", ok, none, NULL, "chat data needs a tokenizer");
  // A model whose tokenizer could not be read: text is refused with the
  // reason, not read byte by byte.
  none.no_tok = "tokenizer.json: model: the Unigram model is not implemented (BPE is)";
  bad("unreadable.txt", "plain text\n", none, NULL, "text data needs a tokenizer: tokenizer.json: model: the Unigram");
}

int main(void) {
  tmp_make();
  eng_err e = {0};
  g_tok = tok_fixture("llama3", &g_enc);
  CHECK_OK(eng_chat_load(&g_chat, NULL, tok_fixture_path("llama3", NULL), NULL, &e), &e);
  CHECK(g_chat.kind == ENG_CHAT_LLAMA3 && g_chat.bos && g_chat.eos, "llama3 fixture's template");
  g_bos = eng_tok_id(g_tok, g_chat.bos);
  g_eos = eng_tok_id(g_tok, g_chat.eos);
  test_text();
  test_chat();
  test_cache();
  test_threads();
  test_errors();
  eng_chat_free(&g_chat);
  eng_tok_enc_free(g_enc);
  eng_tok_free(g_tok);
  tmp_cleanup();
  printf("ok\n");
  return 0;
}
