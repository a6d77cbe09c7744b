// RocksDB reports failures as strings ("IO error: No space left on device:
// While appending to file: ..."); this turns them into the store's codes.
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "store_impl.h"

const char *store_err_name(int code) {
  switch (code) {
  case STORE_EBUSY: return "store in use";
  case STORE_ENOSPC: return "no space left on device (ENOSPC)";
  case STORE_ECORRUPT: return "corrupted data";
  case STORE_EVERSION: return "unknown store format";
  default: return eng_err_name(code);
  }
}

static int classify(const char *msg) {
  if (strstr(msg, "No space left on device")) return STORE_ENOSPC;
  // RocksDB's LOCK file: another process holds it (fcntl lock, EAGAIN) or
  // another handle in this process does.
  if ((strstr(msg, "While lock file") && strstr(msg, "temporarily unavailable")) ||
      strstr(msg, "lock hold by current process"))
    return STORE_EBUSY;
  if (!strncmp(msg, "Corruption:", 11)) return STORE_ECORRUPT;
  // A file shorter than the database's metadata says it is (mmap reads).
  if (strstr(msg, "larger than file length")) return STORE_ECORRUPT;
  return ENG_EIO;
}

int store_rocks_err(store *s, char *err, int write, eng_err *e, const char *fmt, ...) {
  int code = classify(err);
  char ctx[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ctx, sizeof ctx, fmt, ap);
  va_end(ap);
  eng_err_set(e, code, "%s: %s: %s", ctx, store_err_name(code), err);
  rocksdb_free(err);
  if (write) atomic_store(&s->need_reopen, 1);
  return code;
}

int store_id_check(const char *what, const char *id, int max, eng_err *e) {
  size_t n = id ? strlen(id) : 0;
  int ok = n >= 1 && n <= (size_t)max;
  for (size_t i = 0; ok && i < n; i++) {
    char c = id[i];
    ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == '-';
  }
  if (ok) return 0;
  if (!id) return eng_err_set(e, ENG_EINVAL, "%s is NULL", what);
  return eng_err_set(e, ENG_EINVAL, "%s \"%.80s\" is not 1 to %d characters of A-Z a-z 0-9 . _ -", what, id, max);
}
