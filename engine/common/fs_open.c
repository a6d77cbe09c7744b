// The file policy (fs_open.h): roots as descriptors, opens beneath them,
// the caller's credentials around each open.
#define _GNU_SOURCE // O_PATH, O_NOFOLLOW, syscall

#include "common/fs_open.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

int eng_fs_new(eng_fs **out, const char *const *roots, int n, eng_err *e) {
  eng_fs *fs = calloc(1, sizeof *fs);
  if (!fs) return eng_err_set(e, ENG_ENOMEM, "cannot allocate the file policy");
  for (int i = 0; i < n && fs->n_roots < ENG_FS_MAX_ROOTS; i++) {
    int fd = open(roots[i], O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) continue; // a root that is gone holds nothing to read
    char *r = strdup(roots[i]);
    if (!r) {
      close(fd);
      eng_fs_free(fs);
      return eng_err_set(e, ENG_ENOMEM, "cannot allocate the file policy");
    }
    fs->root[fs->n_roots] = r;
    fs->root_fd[fs->n_roots++] = fd;
  }
  *out = fs;
  return ENG_OK;
}

int eng_fs_set_caller(eng_fs *fs, uid_t uid, gid_t gid, const gid_t *groups, int n_groups, eng_err *e) {
  if (n_groups < 0 || n_groups > ENG_FS_MAX_GROUPS)
    return eng_err_set(e, ENG_EINVAL, "caller credentials: %d supplementary groups, at most %d", n_groups,
                       ENG_FS_MAX_GROUPS);
  fs->as_caller = 1;
  fs->uid = uid;
  fs->gid = gid;
  fs->n_groups = n_groups;
  if (n_groups) memcpy(fs->groups, groups, (size_t)n_groups * sizeof *groups);
  return ENG_OK;
}

void eng_fs_free(eng_fs *fs) {
  if (!fs) return;
  for (int i = 0; i < fs->n_roots; i++) {
    close(fs->root_fd[i]);
    free(fs->root[i]);
  }
  free(fs);
}

// ---- credentials --------------------------------------------------------------
// The raw syscalls change this thread's credentials only; glibc's wrappers
// (setgroups above all) would change every thread of the daemon.

typedef struct creds {
  int on;
  uid_t fsuid;
  gid_t fsgid;
  int n;
  gid_t groups[ENG_FS_MAX_GROUPS];
} creds;

static void creds_leave(creds *c) {
  if (!c->on) return;
  syscall(SYS_setfsuid, c->fsuid);
  syscall(SYS_setfsgid, c->fsgid);
  syscall(SYS_setgroups, (size_t)c->n, c->groups);
  c->on = 0;
}

// Takes the caller's access for one open; -1 (nothing changed) when it
// cannot, and then the open is refused rather than made as root.
static int creds_enter(const eng_fs *fs, creds *c) {
  c->on = 0;
  if (!fs || !fs->as_caller || geteuid() != 0) return 0;
  c->n = getgroups(ENG_FS_MAX_GROUPS, c->groups);
  if (c->n < 0) return -1;
  c->on = 1;
  c->fsgid = (gid_t)syscall(SYS_setfsgid, (gid_t)-1);
  c->fsuid = (uid_t)syscall(SYS_setfsuid, (uid_t)-1);
  int ok = syscall(SYS_setgroups, (size_t)fs->n_groups, fs->groups) == 0;
  syscall(SYS_setfsgid, fs->gid);
  syscall(SYS_setfsuid, fs->uid);
  // setfsuid answers the old value whatever happens: read the new ones back.
  ok = ok && (uid_t)syscall(SYS_setfsuid, (uid_t)-1) == fs->uid && (gid_t)syscall(SYS_setfsgid, (gid_t)-1) == fs->gid;
  if (ok) return 0;
  creds_leave(c);
  return -1;
}

// ---- resolving beneath a root --------------------------------------------------

enum { OPEN_FLAGS = O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC };

// Without openat2 (Linux before 5.6): one component at a time, no symlink
// followed at all and no "..", which refuses what openat2 would refuse and
// also the relative links it would allow.
static int walk_nofollow(int root, const char *rest) {
  char buf[4096];
  if (strlen(rest) >= sizeof buf) {
    errno = ENAMETOOLONG;
    return -1;
  }
  strcpy(buf, rest);
  int dir = root, fd = -1;
  errno = ENOENT; // an empty rest names the root, which is no file
  for (char *save = NULL, *c = strtok_r(buf, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
    if (!strcmp(c, "..")) {
      errno = EXDEV;
      fd = -1;
      break;
    }
    int last = save[strspn(save, "/")] == '\0';
    fd = openat(dir, c, last ? OPEN_FLAGS | O_NOFOLLOW : O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dir != root) close(dir);
    dir = fd;
    if (fd < 0 || last) break;
  }
  if (dir != root && dir != fd) close(dir);
  return fd;
}

static int open_beneath(int root, const char *rest) {
  struct open_how how = {.flags = OPEN_FLAGS, .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
  int fd = (int)syscall(SYS_openat2, root, rest, &how, sizeof how);
  if (fd >= 0 || errno != ENOSYS) return fd;
  return walk_nofollow(root, rest);
}

// The root path is spelled under (the daemon hands out resolved paths), and
// the part of path below it; -1 with ENOENT when it is under none.
static int root_of(const eng_fs *fs, const char *path, const char **rest) {
  for (int i = 0; i < fs->n_roots; i++) {
    size_t n = strlen(fs->root[i]);
    if (!strcmp(fs->root[i], "/")) n = 0; // "/" holds everything
    if (strncmp(path, fs->root[i], n) || path[n] != '/') continue;
    *rest = path + n + strspn(path + n, "/");
    return fs->root_fd[i];
  }
  errno = ENOENT;
  return -1;
}

static int raw_open(const eng_fs *fs, const char *path) {
  if (!fs) return open(path, OPEN_FLAGS);
  const char *rest;
  int root = root_of(fs, path, &rest);
  if (root < 0) return -1;
  creds c;
  if (creds_enter(fs, &c)) {
    errno = EACCES;
    return -1;
  }
  int fd = open_beneath(root, rest);
  int err = errno;
  creds_leave(&c);
  errno = err;
  return fd;
}

static const char *not_regular(mode_t m) {
  return S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) ? "a character device" : S_ISBLK(m) ? "a block device"
       : S_ISSOCK(m) ? "a socket" : S_ISDIR(m) ? "a directory" : "not a regular file";
}

static int fs_open(const eng_fs *fs, const char *path, int optional, int *fd, eng_err *e) {
  *fd = -1;
  int f = raw_open(fs, path);
  if (f < 0 && optional && errno == ENOENT) return 1;
  if (f < 0) {
    // Outside the policy the reason is the user's own business.
    if (!fs) return eng_err_set(e, ENG_EIO, "%s: cannot open: %s", path, strerror(errno));
    return eng_err_set(e, ENG_EIO, "%s: " ENG_FS_NOT_THERE, path);
  }
  struct stat st;
  int rc = ENG_OK;
  if (fstat(f, &st) != 0)
    rc = eng_err_set(e, ENG_EIO, "%s: cannot stat: %s", path, strerror(errno));
  else if (!S_ISREG(st.st_mode))
    rc = eng_err_set(e, ENG_EIO, "%s: is %s, not a regular file", path, not_regular(st.st_mode));
  // A regular file: reads block as usual from here on.
  else if (fcntl(f, F_SETFL, fcntl(f, F_GETFL) & ~O_NONBLOCK) != 0)
    rc = eng_err_set(e, ENG_EIO, "%s: fcntl: %s", path, strerror(errno));
  if (rc) {
    close(f);
    return rc;
  }
  *fd = f;
  return ENG_OK;
}

int eng_fs_open(const eng_fs *fs, const char *path, int *fd, eng_err *e) { return fs_open(fs, path, 0, fd, e); }

int eng_fs_open_opt(const eng_fs *fs, const char *path, int *fd, eng_err *e) { return fs_open(fs, path, 1, fd, e); }

int eng_fs_pread(int fd, const char *path, uint64_t size, void *buf, size_t n, uint64_t off, eng_err *e) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = pread(fd, (char *)buf + got, n - got, (off_t)(off + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0)
      return eng_err_set(e, ENG_EIO, "%s: read failed at byte %llu: %s", path, (unsigned long long)(off + got),
                         strerror(errno));
    if (r == 0) break;
    got += (size_t)r;
  }
  if (got == n) return ENG_OK;
  struct stat st;
  unsigned long long now = fstat(fd, &st) == 0 ? (unsigned long long)st.st_size : off + got;
  return eng_err_set(e, ENG_EIO, "%s: shrank from %llu to %llu bytes since it was opened", path,
                     (unsigned long long)size, now);
}

int eng_fs_exists(const eng_fs *fs, const char *path) {
  int fd = raw_open(fs, path);
  if (fd < 0) return errno != ENOENT;
  close(fd);
  return 1;
}

// Reads rather than maps, for the reason eng_fs_pread gives.
int eng_fs_read_all(int fd, const char *path, char **buf, size_t *len, eng_err *e) {
  *buf = NULL;
  *len = 0;
  struct stat st;
  if (fstat(fd, &st) != 0) return eng_err_set(e, ENG_EIO, "%s: cannot stat: %s", path, strerror(errno));
  size_t n = (size_t)st.st_size;
  char *b = malloc(n + 1);
  if (!b) return eng_err_set(e, ENG_ENOMEM, "%s: cannot allocate %zu bytes to read it", path, n + 1);
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, b + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  if (got != n) {
    free(b);
    return eng_err_set(e, ENG_EIO, "%s: read %zu of %zu bytes", path, got, n);
  }
  b[n] = '\0';
  *buf = b;
  *len = n;
  return ENG_OK;
}
