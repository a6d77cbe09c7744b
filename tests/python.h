// Running the tests' Python: TRAIND_PYTHON, the project venv's interpreter
// (tests/CMakeLists.txt), which has every package of tests/requirements.txt.
// Without it a test fails, never skips: a check that quietly does not run on
// a fresh machine is a check CI never makes.
#ifndef TESTS_PYTHON_H
#define TESTS_PYTHON_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "model/safetensors.h"

// Runs TRAIND_PYTHON with the arguments fmt formats (a shell command line,
// so paths must not contain spaces) and returns its exit status.
static inline int py_run(const char *fmt, ...) {
  CHECK(access(TRAIND_PYTHON, X_OK) == 0, "%s is missing: run deploy/install-deps.sh (it makes the venv)",
        TRAIND_PYTHON);
  char args[4096], cmd[4500];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  CHECK(n >= 0 && (size_t)n < sizeof args, "python arguments too long: %s", args);
  snprintf(cmd, sizeof cmd, "%s %s", TRAIND_PYTHON, args);
  int st = system(cmd);
  CHECK(st != -1 && WIFEXITED(st), "cannot run %s", cmd);
  return WEXITSTATUS(st);
}

// transformers loads the exported model directory dir and must compute the
// engine's logits [B, T, V] for ids [B, T] to 1e-4 (tests/ref/check_hf_export.py,
// which reads them from the file ref, a scratch path). With source, the
// multimodal checkpoint the export came from, its tensors outside the text
// model must be in the export bit for bit (NULL: none).
static inline void py_check_hf_export(const char *dir, const char *ref, const int32_t *ids, const float *logits, int B,
                                      int T, int V, const char *source) {
  eng_st_src src[2] = {
      {.name = "input_ids", .dtype = ENG_ST_I32, .ndim = 2, .shape = {B, T}, .data = ids},
      {.name = "logits", .dtype = ENG_ST_F32, .ndim = 3, .shape = {B, T, V}, .data = logits},
  };
  eng_err e = {0};
  CHECK_OK(eng_st_write(ref, src, 2, &e), &e);
  fflush(stdout);
  int rc = py_run("%s/tests/ref/check_hf_export.py %s %s %s", TRAIND_SOURCE_DIR, dir, ref, source ? source : "");
  CHECK(rc == 0, "tests/ref/check_hf_export.py %s: exit %d (its reason is printed above)", dir, rc);
}

// transformers and tokenizers load the export dir of a model from directory
// source: its tokenizer files came along, its token ids are source's, and it
// generates (tests/ref/check_export_tokenizer.py).
static inline void py_check_export_tokenizer(const char *dir, const char *source) {
  fflush(stdout);
  int rc = py_run("%s/tests/ref/check_export_tokenizer.py %s %s", TRAIND_SOURCE_DIR, dir, source);
  CHECK(rc == 0, "tests/ref/check_export_tokenizer.py %s: exit %d (its reason is printed above)", dir, rc);
}

#endif
