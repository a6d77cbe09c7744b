// A private temporary directory for one test program, removed with all it
// holds at the end. The including file defines _XOPEN_SOURCE 700 (for mkdtemp
// and nftw) before its first #include.
#ifndef TESTS_UNIT_TMPDIR_H
#define TESTS_UNIT_TMPDIR_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"

static char tmp_root[64];

static inline const char *tmp_make(void) {
  snprintf(tmp_root, sizeof tmp_root, "/tmp/traind-tmp-XXXXXX");
  CHECK(mkdtemp(tmp_root), "mkdtemp failed");
  return tmp_root;
}

// tmp_root/name, in one of a few rotating buffers so that a call can take two.
static inline const char *tmp_path(const char *name) {
  static char buf[4][512];
  static int k;
  char *p = buf[k++ & 3];
  snprintf(p, sizeof buf[0], "%s/%s", tmp_root, name);
  return p;
}

static int tmp_remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  CHECK(remove(path) == 0, "cannot remove %s", path);
  return 0;
}

static inline void tmp_cleanup(void) {
  CHECK(nftw(tmp_root, tmp_remove_one, 16, FTW_DEPTH | FTW_PHYS) == 0, "cannot clean %s", tmp_root);
}

#endif
