// Opening the files a job names: the one place that decides whether a path
// may be read (DESIGN §5). A policy (eng_fs) holds an O_PATH descriptor of
// each data root, opened once per job from the daemon's resolved roots, and
// optionally the caller's credentials. Every open under a policy resolves
// beneath the root its path starts with (openat2 RESOLVE_BENEATH: a relative
// symlink that stays under the root is followed, as in a Hugging Face cache
// snapshot; an absolute or escaping one is refused), never blocks (O_NONBLOCK
// until fstat has said what it is) and hands back only regular files. A NULL
// policy opens anything, for the tools whose user names the paths.
//
// Errors never say why a path is not there: absent, outside the roots,
// refused by a symlink, unreadable by the caller all read
// "<path>: " ENG_FS_NOT_THERE, so nobody can probe the rest of the
// filesystem through a job's messages.
#ifndef ENG_COMMON_FS_OPEN_H
#define ENG_COMMON_FS_OPEN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/err.h"

#define ENG_FS_NOT_THERE "not found under the data roots or not readable"

enum { ENG_FS_MAX_ROOTS = 16, ENG_FS_MAX_GROUPS = 64 };

typedef struct eng_fs {
  int n_roots;
  char *root[ENG_FS_MAX_ROOTS]; // resolved (realpath) root directories
  int root_fd[ENG_FS_MAX_ROOTS]; // O_PATH | O_DIRECTORY of each
  // The caller's credentials: when set and the process is root, each open is
  // made with the caller's access (fsuid, fsgid, groups of this thread only).
  int as_caller;
  uid_t uid;
  gid_t gid;
  int n_groups;
  gid_t groups[ENG_FS_MAX_GROUPS];
} eng_fs;

// A policy over roots (resolved paths; a root that cannot be opened is
// left out, so nothing under it can be read). *out is freed by eng_fs_free.
int eng_fs_new(eng_fs **out, const char *const *roots, int n, eng_err *e);
// Opens every later open of fs with the access of uid, gid and groups.
int eng_fs_set_caller(eng_fs *fs, uid_t uid, gid_t gid, const gid_t *groups, int n_groups, eng_err *e);
void eng_fs_free(eng_fs *fs);

// Opens path read-only (blocking reads, close-on-exec) as a regular file.
// ENG_EIO with the one answer above, or naming what path is instead (a
// FIFO, a device, a socket, a directory: refused without blocking).
int eng_fs_open(const eng_fs *fs, const char *path, int *fd, eng_err *e);
// The same, but a path that does not exist returns 1 and sets nothing:
// for the optional files of a model directory.
int eng_fs_open_opt(const eng_fs *fs, const char *path, int *fd, eng_err *e);
// Exactly n bytes at off of fd, the file path opened with size bytes: a
// short read says "<path>: shrank from <size> to <now> bytes since it was
// opened". The files a job names are read this way rather than mapped, since
// a mapped file truncated under its reader is SIGBUS for the whole process.
int eng_fs_pread(int fd, const char *path, uint64_t size, void *buf, size_t n, uint64_t off, eng_err *e);
// The whole of the open file fd (named path in messages) into *buf
// (malloc'd, NUL-terminated for convenience; *len excludes the NUL).
int eng_fs_read_all(int fd, const char *path, char **buf, size_t *len, eng_err *e);

// Whether path is there as fs sees it: 0 only when it does not exist (any
// other refusal answers 1, so that the open that follows names it).
int eng_fs_exists(const eng_fs *fs, const char *path);

#endif
