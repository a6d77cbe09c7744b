// engine/tok against the Rust tokenizers package: for the four tokenizers of
// tests/fixtures/tok (Qwen2-, Qwen3.5-, Llama-3- and GPT-2-style, trained by
// tests/ref/gen_tok_fixtures.py), and the Qwen3.5-style one grown to Qwen3.5's
// 248044 BPE tokens (made by that script at test time), every case of cases.jsonl — English, code,
// CJK, emoji, combining marks, white space, digits, added tokens with each
// flag, random and invalid UTF-8 (repaired as Python's "replace" does) —
// must give tokenizers' ids exactly, with and without the post-processor's
// template, and decode to tokenizers' text with and without special tokens;
// decode_cases.jsonl decodes id sequences that split characters or leave
// the vocabulary. Decoding the ids of valid text gives the text back (as
// normalized), except where the fixtures' ref.json lists that tokenizers
// does not either.
#define _XOPEN_SOURCE 700
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "python.h"
#include "tok_fixture.h"
#include "unit/tmpdir.h"

static int hexval(char c) { return c <= '9' ? c - '0' : (c | 32) - 'a' + 10; }

static char *unhex(const char *h, size_t *n) {
  size_t m = strlen(h) / 2;
  char *s = malloc(m + 1);
  for (size_t i = 0; i < m; i++) s[i] = (char)(hexval(h[2 * i]) << 4 | hexval(h[2 * i + 1]));
  s[m] = '\0';
  *n = m;
  return s;
}

static int ids_equal(const eng_tok_ids *got, const json_t *want) {
  if (got->n != json_array_size(want)) return 0;
  for (size_t i = 0; i < got->n; i++)
    if (got->ids[i] != json_integer_value(json_array_get(want, i))) return 0;
  return 1;
}

static void show(const char *what, const char *name, size_t line, const eng_tok_ids *got, const json_t *want) {
  fprintf(stderr, "%s line %zu: %s differ\n  got :", name, line, what);
  for (size_t i = 0; i < got->n && i < 40; i++) fprintf(stderr, " %d", got->ids[i]);
  fprintf(stderr, "\n  want:");
  for (size_t i = 0; i < json_array_size(want) && i < 40; i++)
    fprintf(stderr, " %lld", (long long)json_integer_value(json_array_get(want, i)));
  fprintf(stderr, "\n");
}

static int decode_is(const eng_tok *t, const int32_t *ids, size_t n, int skip, const char *want_hex) {
  size_t wn;
  char *want = unhex(want_hex, &wn);
  char *got;
  size_t gn;
  eng_err e = {0};
  CHECK_OK(eng_tok_decode(t, ids, n, skip, &got, &gn, &e), &e);
  int ok = gn == wn && memcmp(got, want, gn) == 0;
  free(got);
  free(want);
  return ok;
}

// The tokenizer of directory dir against its cases; name for messages.
static int run_dir(const char *name, const char *dir) {
  char path[4096];
  eng_err e = {0};
  eng_tok_enc *enc;
  eng_tok *t;
  snprintf(path, sizeof path, "%s/tokenizer.json", dir);
  CHECK_OK(eng_tok_load(&t, NULL, path, &e), &e);
  CHECK_OK(eng_tok_enc_new(&enc, t, &e), &e);
  snprintf(path, sizeof path, "%s/cases.jsonl", dir);
  FILE *f = fopen(path, "r");
  CHECK(f, "cannot open %s", path);
  char *line = NULL;
  size_t cap = 0, lineno = 0, cases = 0, bad = 0;
  while (getline(&line, &cap, f) > 0) {
    lineno++;
    json_t *c = json_loads(line, 0, NULL);
    CHECK(c, "%s line %zu: not JSON", path, lineno);
    size_t rn, n;
    char *raw = unhex(json_string_value(json_object_get(c, "hex")), &rn), *text;
    CHECK_OK(eng_tok_utf8_repair(raw, rn, &text, &n, &e), &e);
    eng_tok_ids ids = {0}, sp = {0};
    CHECK_OK(eng_tok_encode(enc, text, n, 0, &ids, &e), &e);
    CHECK_OK(eng_tok_encode(enc, text, n, 1, &sp, &e), &e);
    int ok = 1;
    if (!ids_equal(&ids, json_object_get(c, "ids"))) show("ids", name, lineno, &ids, json_object_get(c, "ids")), ok = 0;
    if (!ids_equal(&sp, json_object_get(c, "ids_special")))
      show("ids with the template", name, lineno, &sp, json_object_get(c, "ids_special")), ok = 0;
    if (!decode_is(t, ids.ids, ids.n, 0, json_string_value(json_object_get(c, "decoded_hex"))))
      fprintf(stderr, "%s line %zu: decode differs\n", name, lineno), ok = 0;
    if (!decode_is(t, ids.ids, ids.n, 1, json_string_value(json_object_get(c, "decoded_skip_hex"))))
      fprintf(stderr, "%s line %zu: decode without special tokens differs\n", name, lineno), ok = 0;
    // Round trip: llama3 has no normalizer and no stripping added token, so
    // its decode gives back every valid text exactly.
    if (!strcmp(name, "llama3")) {
      char *back;
      size_t bn;
      CHECK_OK(eng_tok_decode(t, ids.ids, ids.n, 0, &back, &bn, &e), &e);
      if (bn != n || memcmp(back, text, n)) fprintf(stderr, "%s line %zu: decode(encode(text)) != text\n", name, lineno), ok = 0;
      free(back);
    }
    // Offsets rise and stay inside the text.
    for (size_t i = 0; i < ids.n; i++)
      CHECK(ids.off[i] <= n && (i == 0 || ids.off[i] >= ids.off[i - 1]), "%s line %zu: offset %zu out of order",
            name, lineno, i);
    bad += !ok;
    cases++;
    eng_tok_ids_free(&ids);
    eng_tok_ids_free(&sp);
    free(raw);
    free(text);
    json_decref(c);
  }
  fclose(f);
  snprintf(path, sizeof path, "%s/decode_cases.jsonl", dir);
  f = fopen(path, "r");
  CHECK(f, "cannot open %s", path);
  lineno = 0;
  size_t dcases = 0;
  while (getline(&line, &cap, f) > 0) {
    lineno++;
    json_t *c = json_loads(line, 0, NULL);
    json_t *arr = json_object_get(c, "ids");
    size_t n = json_array_size(arr);
    int32_t *ids = malloc((n + 1) * sizeof *ids);
    for (size_t i = 0; i < n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(arr, i));
    if (!decode_is(t, ids, n, 0, json_string_value(json_object_get(c, "decoded_hex"))) ||
        !decode_is(t, ids, n, 1, json_string_value(json_object_get(c, "decoded_skip_hex")))) {
      fprintf(stderr, "%s decode_cases line %zu: decode differs\n", name, lineno);
      bad++;
    }
    dcases++;
    free(ids);
    json_decref(c);
  }
  fclose(f);
  free(line);
  printf("%s: %zu encode cases, %zu decode cases, %zu differ from tokenizers\n", name, cases, dcases, bad);
  eng_tok_enc_free(enc);
  eng_tok_free(t);
  return (int)bad;
}

static int run(const char *name) { return run_dir(name, tok_fixture_path(name, NULL)); }

int main(void) {
  int bad = run("qwen2") + run("qwen3_5") + run("llama3") + run("gpt2");
  // Qwen3.5's vocabulary size: the qwen3_5 tokenizer grown to 248044 BPE
  // tokens (ids past 2^17), made here, about 10 MB.
  tmp_make();
  const char *large = tmp_path("qwen3_5-248k");
  CHECK(py_run("%s/tests/ref/gen_tok_fixtures.py --large %s", TRAIND_SOURCE_DIR, large) == 0,
        "tests/ref/gen_tok_fixtures.py --large failed");
  bad += run_dir("qwen3_5 at 248k", large);
  tmp_cleanup();
  CHECK(bad == 0, "%d cases differ from tokenizers", bad);
  printf("ok\n");
  return 0;
}
