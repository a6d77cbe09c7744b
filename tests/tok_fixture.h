// The tokenizers of tests/fixtures/tok (written by tests/ref/gen_tok_fixtures.py:
// "qwen2", "qwen3_5", "llama3", "gpt2"), for the tests of engine/tok and of the data
// that goes through it.
#ifndef TESTS_TOK_FIXTURE_H
#define TESTS_TOK_FIXTURE_H

#include <stdio.h>

#include "check.h"
#include "fixture.h"
#include "tok/tok.h"

// tests/fixtures/tok/<name>, or a file in it when file is not NULL (fx_dir's
// rotating buffers).
static inline const char *tok_fixture_path(const char *name, const char *file) {
  char rel[256];
  snprintf(rel, sizeof rel, "tok/%s%s%s", name, file ? "/" : "", file ? file : "");
  return fx_dir(rel);
}

// Loads the fixture's tokenizer.json, and an encoder for it when enc is not NULL.
static inline eng_tok *tok_fixture(const char *name, eng_tok_enc **enc) {
  eng_err e = {0};
  eng_tok *t;
  CHECK_OK(eng_tok_load(&t, NULL, tok_fixture_path(name, "tokenizer.json"), &e), &e);
  if (enc) CHECK_OK(eng_tok_enc_new(enc, t, &e), &e);
  return t;
}

#endif
