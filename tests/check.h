// Minimal test assertions that carry file and line (llm.c style). A failed
// CHECK prints where and why and exits 1, so ctest reports the test failed.
#ifndef TESTS_CHECK_H
#define TESTS_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond, ...)                                                        \
  do {                                                                          \
    if (!(cond)) {                                                              \
      fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond);  \
      fprintf(stderr, __VA_ARGS__);                                             \
      fprintf(stderr, "\n");                                                    \
      exit(1);                                                                  \
    }                                                                           \
  } while (0)

// Runs an engine call that must succeed; on failure prints its eng_err.
#define CHECK_OK(call, errp)                                                    \
  do {                                                                          \
    int rc_ = (call);                                                           \
    if (rc_ != 0) {                                                             \
      fprintf(stderr, "%s:%d: %s returned %d: %s\n", __FILE__, __LINE__, #call, \
              rc_, (errp)->msg);                                                \
      exit(1);                                                                  \
    }                                                                           \
  } while (0)

#endif
