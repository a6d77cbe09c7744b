// Whole-file reads for the formats that load into memory (text, JSONL).
#define _POSIX_C_SOURCE 200809L // fileno under -std=c17

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/data_impl.h"

int eng_data_file_read(const char *path, char **buf, size_t *len, eng_err *e) {
  *buf = NULL;
  *len = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return eng_err_set(e, ENG_EIO, "%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    fclose(f);
    return eng_err_set(e, ENG_EIO, "%s: not a regular file", path);
  }
  size_t n = (size_t)st.st_size;
  char *b = malloc(n + 1);
  if (!b) {
    fclose(f);
    return eng_err_set(e, ENG_ENOMEM, "%s: cannot allocate %zu bytes to read it", path, n + 1);
  }
  size_t got = fread(b, 1, n, f);
  int failed = ferror(f);
  fclose(f);
  if (failed || got != n) {
    free(b);
    return eng_err_set(e, ENG_EIO, "%s: read %zu of %zu bytes", path, got, n);
  }
  b[n] = '\0';
  *buf = b;
  *len = n;
  return ENG_OK;
}
