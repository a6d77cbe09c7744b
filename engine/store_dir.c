// The directory implementation of eng_store (engine-only use and tests).
// root/ckpt-<step>/<name> per shard and root/ckpt-<step>/MANIFEST, which
// lists "name size crc32c" lines and is written last. The checkpoint is built
// in root/.tmp-<step>/ and renamed into place after every file is fsynced.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/crc32c.h"
#include "store.h"

enum { MAX_ENTRIES = 65536 };

typedef struct entry {
  char name[64];
  uint64_t size;
  uint32_t crc;
} entry;

typedef struct dir_store {
  char root[4096];
  char tmp[4200];       // directory of the checkpoint being built
  int64_t building;     // step being built, -1 when none
  entry *entries;       // manifest of the checkpoint being built
  int n_entries;
} dir_store;

static int io_err(eng_err *e, const char *what, const char *path) {
  return eng_err_set(e, ENG_EIO, "%s %s: %s", what, path, strerror(errno));
}

static int fsync_path(const char *path, eng_err *e) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return io_err(e, "cannot open", path);
  int rc = fsync(fd);
  close(fd);
  return rc ? io_err(e, "cannot fsync", path) : 0;
}

static int write_file(const char *path, const void *data, size_t n, eng_err *e) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return io_err(e, "cannot create", path);
  const char *p = data;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      int rc = io_err(e, "cannot write", path);
      close(fd);
      return rc;
    }
    p += w;
    n -= (size_t)w;
  }
  if (fsync(fd)) {
    int rc = io_err(e, "cannot fsync", path);
    close(fd);
    return rc;
  }
  return close(fd) ? io_err(e, "cannot close", path) : 0;
}

static void remove_tree(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *de;
  char p[4400];
  while ((de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
    unlink(p);
  }
  closedir(d);
  rmdir(dir);
}

static int valid_name(const char *name) {
  size_t n = strlen(name);
  if (n == 0 || n >= sizeof(((entry *)0)->name) || !strcmp(name, "MANIFEST")) return 0;
  for (size_t i = 0; i < n; i++)
    if (!(name[i] == '.' || name[i] == '_' || name[i] == '-' || (name[i] >= '0' && name[i] <= '9') ||
          (name[i] >= 'a' && name[i] <= 'z') || (name[i] >= 'A' && name[i] <= 'Z')))
      return 0;
  return name[0] != '.';
}

static int ds_begin(void *ctx, int64_t step, eng_err *e) {
  dir_store *s = ctx;
  if (step < 0) return eng_err_set(e, ENG_EINVAL, "checkpoint step must be non-negative (got %" PRId64 ")", step);
  snprintf(s->tmp, sizeof s->tmp, "%s/.tmp-%" PRId64, s->root, step);
  remove_tree(s->tmp); // a build interrupted earlier
  if (mkdir(s->tmp, 0755)) return io_err(e, "cannot create", s->tmp);
  s->building = step;
  s->n_entries = 0;
  return 0;
}

static int ds_put(void *ctx, const char *name, const void *data, size_t n, eng_err *e) {
  dir_store *s = ctx;
  if (s->building < 0) return eng_err_set(e, ENG_ESTATE, "%s: checkpoint put before begin", s->root);
  if (!valid_name(name)) return eng_err_set(e, ENG_EINVAL, "%s: invalid shard name \"%s\"", s->root, name);
  if (s->n_entries == MAX_ENTRIES) return eng_err_set(e, ENG_EINVAL, "%s: too many shards", s->root);
  char path[4400];
  snprintf(path, sizeof path, "%s/%s", s->tmp, name);
  int rc = write_file(path, data, n, e);
  if (rc) return rc;
  entry *en = &s->entries[s->n_entries++];
  snprintf(en->name, sizeof en->name, "%s", name);
  en->size = n;
  en->crc = eng_crc32c(0, data, n);
  return 0;
}

static int ds_commit(void *ctx, eng_err *e) {
  dir_store *s = ctx;
  if (s->building < 0) return eng_err_set(e, ENG_ESTATE, "%s: checkpoint commit before begin", s->root);
  size_t cap = (size_t)s->n_entries * 100 + 64, len = 0;
  char *buf = malloc(cap);
  if (!buf) return eng_err_set(e, ENG_ENOMEM, "cannot allocate a manifest");
  len += (size_t)snprintf(buf + len, cap - len, "traind-ckpt 1 %" PRId64 "\n", s->building);
  for (int i = 0; i < s->n_entries; i++)
    len += (size_t)snprintf(buf + len, cap - len, "%s %" PRIu64 " %08x\n", s->entries[i].name,
                            s->entries[i].size, s->entries[i].crc);
  char path[4400], final[4400];
  snprintf(path, sizeof path, "%s/MANIFEST", s->tmp);
  int rc = write_file(path, buf, len, e);
  free(buf);
  if (rc) return rc;
  if ((rc = fsync_path(s->tmp, e))) return rc;
  snprintf(final, sizeof final, "%s/ckpt-%" PRId64, s->root, s->building);
  remove_tree(final); // a checkpoint of the same step is replaced
  if (rename(s->tmp, final)) return io_err(e, "cannot rename into", final);
  s->building = -1;
  return fsync_path(s->root, e);
}

static int ds_latest(void *ctx, int64_t *step, eng_err *e) {
  dir_store *s = ctx;
  DIR *d = opendir(s->root);
  if (!d) return io_err(e, "cannot open", s->root);
  int64_t best = -1;
  struct dirent *de;
  while ((de = readdir(d))) {
    long long v;
    char rest;
    if (sscanf(de->d_name, "ckpt-%lld%c", &v, &rest) != 1) continue;
    char man[4400];
    snprintf(man, sizeof man, "%s/%s/MANIFEST", s->root, de->d_name);
    if (access(man, R_OK) == 0 && v > best) best = v;
  }
  closedir(d);
  if (best < 0) return 1;
  *step = best;
  return 0;
}

// Finds name in the manifest of step.
static int manifest_find(dir_store *s, int64_t step, const char *name, entry *out, eng_err *e) {
  char path[4400];
  snprintf(path, sizeof path, "%s/ckpt-%" PRId64 "/MANIFEST", s->root, step);
  FILE *f = fopen(path, "r");
  if (!f) return io_err(e, "cannot open", path);
  char line[256];
  int found = 0;
  if (!fgets(line, sizeof line, f) || strncmp(line, "traind-ckpt 1 ", 14)) {
    fclose(f);
    return eng_err_set(e, ENG_EIO, "%s: not a checkpoint manifest", path);
  }
  while (!found && fgets(line, sizeof line, f)) {
    entry en;
    if (sscanf(line, "%63s %" SCNu64 " %x", en.name, &en.size, &en.crc) == 3 && !strcmp(en.name, name)) {
      *out = en;
      found = 1;
    }
  }
  fclose(f);
  return found ? 0 : eng_err_set(e, ENG_EINVAL, "checkpoint at step %" PRId64 " in %s has no shard \"%s\"",
                                 step, s->root, name);
}

static int ds_size(void *ctx, int64_t step, const char *name, size_t *n, eng_err *e) {
  entry en;
  int rc = manifest_find(ctx, step, name, &en, e);
  if (!rc) *n = en.size;
  return rc;
}

static int ds_get(void *ctx, int64_t step, const char *name, void *data, size_t n, eng_err *e) {
  dir_store *s = ctx;
  entry en;
  int rc = manifest_find(s, step, name, &en, e);
  if (rc) return rc;
  if (en.size != n)
    return eng_err_set(e, ENG_EINVAL, "checkpoint at step %" PRId64 ": shard \"%s\" has %" PRIu64
                       " bytes, expected %zu", step, name, en.size, n);
  char path[4400];
  snprintf(path, sizeof path, "%s/ckpt-%" PRId64 "/%s", s->root, step, name);
  FILE *f = fopen(path, "rb");
  if (!f) return io_err(e, "cannot open", path);
  size_t got = fread(data, 1, n, f);
  fclose(f);
  if (got != n)
    return eng_err_set(e, ENG_EIO, "%s: truncated (%zu of %zu bytes)", path, got, n);
  if (eng_crc32c(0, data, n) != en.crc)
    return eng_err_set(e, ENG_EIO, "checkpoint at step %" PRId64 ": shard \"%s\" fails its checksum (%s)",
                       step, name, path);
  return 0;
}

static void ds_close(void *ctx) {
  dir_store *s = ctx;
  free(s->entries);
  free(s);
}

int eng_store_dir_open(eng_store *st, const char *root, eng_err *e) {
  if (mkdir(root, 0755) && errno != EEXIST) return io_err(e, "cannot create", root);
  dir_store *s = calloc(1, sizeof *s);
  if (!s) return eng_err_set(e, ENG_ENOMEM, "cannot allocate a directory store");
  s->entries = calloc(MAX_ENTRIES, sizeof *s->entries);
  if (!s->entries) {
    free(s);
    return eng_err_set(e, ENG_ENOMEM, "cannot allocate a directory store");
  }
  snprintf(s->root, sizeof s->root, "%s", root);
  s->building = -1;
  *st = (eng_store){s, ds_begin, ds_put, ds_commit, ds_latest, ds_size, ds_get, NULL, NULL, NULL, ds_close};
  return 0;
}
