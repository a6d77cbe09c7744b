// POSIX 2008 for open flags, mmap, strdup and fsync under -std=c17 too.
#define _POSIX_C_SOURCE 200809L

#include "model/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int eng_afile_open(eng_afile *f, const char *path, eng_err *e) {
  f->fd = -1;
  if (strlen(path) >= sizeof f->path)
    return eng_err_set(e, ENG_EINVAL, "%.200s...: path is too long", path);
  snprintf(f->path, sizeof f->path, "%s", path);
  snprintf(f->tmp, sizeof f->tmp, "%s.tmp", path);
  f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (f->fd < 0) return eng_err_set(e, ENG_EIO, "%s: cannot create: %s", f->tmp, strerror(errno));
  return ENG_OK;
}

int eng_afile_write(eng_afile *f, const void *buf, size_t n, eng_err *e) {
  const char *p = buf;
  while (n > 0) {
    ssize_t w = write(f->fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return eng_err_set(e, ENG_EIO, "%s: write failed: %s", f->tmp, strerror(errno));
    p += w;
    n -= (size_t)w;
  }
  return ENG_OK;
}

void eng_afile_abort(eng_afile *f) {
  if (f->fd < 0) return;
  close(f->fd);
  f->fd = -1;
  unlink(f->tmp);
}

// The rename is an entry of the directory: it is durable only once the
// directory itself is synced.
static int sync_parent(const char *path, eng_err *e) {
  char dir[4096];
  const char *slash = strrchr(path, '/');
  if (!slash)
    snprintf(dir, sizeof dir, ".");
  else if (slash == path)
    snprintf(dir, sizeof dir, "/");
  else
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return eng_err_set(e, ENG_EIO, "%s: cannot open directory: %s", dir, strerror(errno));
  int rc = fsync(fd);
  int err = errno;
  close(fd);
  if (rc != 0)
    return eng_err_set(e, ENG_EIO, "%s: fsync of directory failed: %s", dir, strerror(err));
  return ENG_OK;
}

int eng_afile_commit(eng_afile *f, eng_err *e) {
  if (fsync(f->fd) != 0) {
    int rc = eng_err_set(e, ENG_EIO, "%s: fsync failed: %s", f->tmp, strerror(errno));
    eng_afile_abort(f);
    return rc;
  }
  int closed = close(f->fd);
  f->fd = -1;
  if (closed != 0 || rename(f->tmp, f->path) != 0) {
    int rc = eng_err_set(e, ENG_EIO, "%s: cannot %s: %s", closed ? f->tmp : f->path,
                         closed ? "close" : "rename into place", strerror(errno));
    unlink(f->tmp);
    return rc;
  }
  return sync_parent(f->path, e);
}

int eng_afile_write_all(const char *path, const void *buf, size_t n, eng_err *e) {
  eng_afile f;
  int rc = eng_afile_open(&f, path, e);
  if (rc) return rc;
  rc = eng_afile_write(&f, buf, n, e);
  if (rc) {
    eng_afile_abort(&f);
    return rc;
  }
  return eng_afile_commit(&f, e);
}

int eng_afile_copy(const eng_fs *fs, const char *from, const char *path, eng_err *e) {
  int fd;
  int rc = eng_fs_open_opt(fs, from, &fd, e);
  if (rc) return rc;
  enum { CHUNK = 1 << 20 };
  char *buf = malloc(CHUNK);
  if (!buf)
    rc = eng_err_set(e, ENG_ENOMEM, "%s: out of memory to copy it", from);
  eng_afile f;
  if (!rc) rc = eng_afile_open(&f, path, e);
  if (rc) {
    free(buf);
    close(fd);
    return rc;
  }
  for (;;) {
    ssize_t n = read(fd, buf, CHUNK);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) rc = eng_err_set(e, ENG_EIO, "%s: read failed: %s", from, strerror(errno));
    if (n <= 0 || (rc = eng_afile_write(&f, buf, (size_t)n, e))) break;
  }
  if (rc)
    eng_afile_abort(&f);
  else
    rc = eng_afile_commit(&f, e);
  free(buf);
  close(fd);
  return rc;
}
