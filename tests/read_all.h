// A whole file as a NUL-terminated malloc'd string, for tests that compare a
// file's bytes (a failed read is a failed CHECK).
#ifndef TESTS_READ_ALL_H
#define TESTS_READ_ALL_H

#include <stdio.h>
#include <stdlib.h>

#include "check.h"

static inline char *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  CHECK(f, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  CHECK(buf && fread(buf, 1, (size_t)n, f) == (size_t)n, "short read of %s", path);
  fclose(f);
  buf[n] = '\0';
  if (len) *len = (size_t)n;
  return buf;
}

#endif
