// The dist tests' loss files: rank 0 writes a run's losses, one hex float
// (%a, every bit) per line, and the test that launched the ranks reads them.
#ifndef TESTS_DIST_LOSSES_H
#define TESTS_DIST_LOSSES_H

#include <stdio.h>

#include "check.h"

static inline void dist_losses_write(const char *path, const double *loss, int n) {
  FILE *f = fopen(path, "w");
  CHECK(f, "cannot write %s", path);
  for (int i = 0; i < n; i++) fprintf(f, "%a\n", loss[i]);
  CHECK(fclose(f) == 0, "cannot write %s", path);
}

static inline void dist_losses_read(const char *path, double *loss, int n) {
  FILE *f = fopen(path, "r");
  CHECK(f, "no %s: the ranks did not write it", path);
  for (int i = 0; i < n; i++) CHECK(fscanf(f, "%la", &loss[i]) == 1, "%s: line %d missing", path, i + 1);
  fclose(f);
}

#endif
