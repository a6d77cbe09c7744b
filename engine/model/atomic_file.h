// Writing a file so that a reader, or a restart after a crash, sees either the
// old content or the complete new one, never a prefix: the bytes go to
// "<path>.tmp", which is fsynced and renamed over path, and then the directory
// is fsynced so that the rename itself survives a power cut.
#ifndef ENG_MODEL_ATOMIC_FILE_H
#define ENG_MODEL_ATOMIC_FILE_H

#include <stddef.h>

#include "common/err.h"
#include "common/fs_open.h"

typedef struct eng_afile {
  int fd;             // the open temporary file; -1 once committed or aborted
  char path[4096];    // final name
  char tmp[4096 + 8]; // path + ".tmp"
} eng_afile;

// Creates (truncating) path.tmp. On failure nothing is left open.
int eng_afile_open(eng_afile *f, const char *path, eng_err *e);

// Appends n bytes. On failure the caller still calls eng_afile_abort.
int eng_afile_write(eng_afile *f, const void *buf, size_t n, eng_err *e);

// fsync, close, rename over path, fsync the directory. Whatever the outcome
// the temporary file is closed; on failure it is also removed.
int eng_afile_commit(eng_afile *f, eng_err *e);

// Closes and removes the temporary file; a no-op after commit.
void eng_afile_abort(eng_afile *f);

// The whole sequence for content already in memory.
int eng_afile_write_all(const char *path, const void *buf, size_t n, eng_err *e);

// The whole sequence for the content of the regular file from, opened under
// fs (common/fs_open.h; NULL: anywhere; a link beneath a root is followed, as
// in the Hugging Face cache). Returns 1, writing nothing, when from does not
// exist.
int eng_afile_copy(const eng_fs *fs, const char *from, const char *path, eng_err *e);

#endif
