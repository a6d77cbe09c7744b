// Whole-file reads for the formats that load into memory (text, JSONL).
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/data_impl.h"

int eng_data_file_read(const eng_data *d, int fd, char **buf, size_t *len, eng_err *e) {
  *buf = NULL;
  *len = 0;
  struct stat st;
  if (fstat(fd, &st) != 0) return eng_err_set(e, ENG_EIO, "%s: cannot stat: %s", d->path, strerror(errno));
  size_t n = (size_t)st.st_size;
  char *b = malloc(n + 1);
  if (!b) return eng_err_set(e, ENG_ENOMEM, "%s: cannot allocate %zu bytes to read it", d->path, n + 1);
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, b + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  if (got != n) {
    free(b);
    return eng_err_set(e, ENG_EIO, "%s: read %zu of %zu bytes", d->path, got, n);
  }
  b[n] = '\0';
  *buf = b;
  *len = n;
  return ENG_OK;
}
