// Refusals at open, each a code and a message naming the directory, never a
// crash: a database another handle or another process holds, a path that is
// a file, a directory the process may not read, a format version this build
// does not know, a RocksDB database that is not a store, and damaged CURRENT,
// MANIFEST and SST files.
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <fcntl.h>
#include <rocksdb/c.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "storage/store.h"
#include "unit/tmpdir.h"

static eng_err e;

static void refused(const char *dir, int want, const char *word, const char *what) {
  store *st = (store *)1;
  int rc = store_open(&st, dir, NULL, &e);
  CHECK(rc == want, "%s: code %d (%s), expected %d: %s", what, rc, store_err_name(rc), want, e.msg);
  CHECK(st == NULL, "%s: no store comes back from a failed open", what);
  CHECK(strstr(e.msg, dir) && (!word || strstr(e.msg, word)), "%s: the message should name %s%s%s: %s", what,
        dir, word ? " and say " : "", word ? word : "", e.msg);
  printf("%-28s %s\n", what, e.msg);
}

// Runs this program again as "--try DIR [UID]": it opens DIR (as UID when
// given) and exits with the code's negation.
static int child_open(const char *self, const char *dir, const char *uid) {
  pid_t pid = fork();
  CHECK(pid >= 0, "fork failed");
  if (pid == 0) {
    execl(self, self, "--try", dir, uid, (char *)NULL);
    _exit(127);
  }
  int status;
  CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status), "the child did not exit normally");
  return -WEXITSTATUS(status);
}

static int try_open(const char *dir, const char *uid) {
  if (uid && (setgid((gid_t)atoi(uid)) || setuid((uid_t)atoi(uid)))) return 126;
  store *st;
  int rc = store_open(&st, dir, NULL, &e);
  fprintf(stderr, "child: %s\n", rc ? e.msg : "opened");
  store_close(st);
  return -rc;
}

// Opens dir with RocksDB directly, with the default family and the first
// `families` of the store's, and puts key = value (when not NULL) into the
// default family.
static void raw_put(const char *dir, int families, const char *key, const char *value) {
  rocksdb_options_t *o = rocksdb_options_create();
  rocksdb_options_set_create_if_missing(o, 1);
  const char *names[] = {"default", "jobs", "events", "ckpt", "act"};
  const rocksdb_options_t *opts[] = {o, o, o, o, o};
  rocksdb_column_family_handle_t *h[5];
  char *err = NULL;
  int n = 1 + families;
  rocksdb_options_set_create_missing_column_families(o, 1);
  rocksdb_t *db = rocksdb_open_column_families(o, dir, n, names, opts, h, &err);
  CHECK(!err, "raw open of %s: %s", dir, err);
  rocksdb_writeoptions_t *w = rocksdb_writeoptions_create();
  if (key) rocksdb_put(db, w, key, strlen(key), value, strlen(value), &err);
  CHECK(!err, "raw put: %s", err);
  for (int i = 0; i < n; i++) rocksdb_column_family_handle_destroy(h[i]);
  rocksdb_close(db);
  rocksdb_writeoptions_destroy(w);
  rocksdb_options_destroy(o);
}

// A fresh store in dir holding a committed checkpoint (so SST and blob files exist).
static void make_store(const char *dir) {
  store *st;
  CHECK_OK(store_open(&st, dir, NULL, &e), &e);
  CHECK_OK(store_job_put(st, "j", "record", 6, 1, 1, &e), &e);
  static char big[1 << 16];
  store_ckpt *c;
  CHECK_OK(store_ckpt_begin(st, "j", 1, &c, &e), &e);
  CHECK_OK(store_ckpt_put(c, "w.0", big, sizeof big, &e), &e);
  CHECK_OK(store_ckpt_put(c, "meta", "m", 1, &e), &e);
  CHECK_OK(store_ckpt_commit(c, &e), &e);
  store_close(st);
}

// The first file in dir whose name starts with prefix and ends with suffix.
static const char *find_file(const char *dir, const char *prefix, const char *suffix) {
  static char path[1024];
  DIR *d = opendir(dir);
  CHECK(d, "cannot list %s", dir);
  struct dirent *de;
  int found = 0;
  while (!found && (de = readdir(d))) {
    size_t n = strlen(de->d_name), m = strlen(suffix);
    if (!strncmp(de->d_name, prefix, strlen(prefix)) && n >= m && !strcmp(de->d_name + n - m, suffix)) {
      snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
      found = 1;
    }
  }
  closedir(d);
  CHECK(found, "no %s*%s in %s", prefix, suffix, dir);
  return path;
}

static void overwrite(const char *path, long off, const char *bytes, size_t n) {
  int fd = open(path, O_WRONLY);
  CHECK(fd >= 0, "cannot open %s", path);
  CHECK(pwrite(fd, bytes, n, off) == (ssize_t)n, "cannot write %s", path);
  close(fd);
}

static long file_size(const char *path) {
  struct stat sb;
  CHECK(stat(path, &sb) == 0, "cannot stat %s", path);
  return (long)sb.st_size;
}

int main(int argc, char **argv) {
  if (argc >= 3 && !strcmp(argv[1], "--try")) return try_open(argv[2], argc > 3 ? argv[3] : NULL);
  tmp_make();

  const char *held = tmp_path("held");
  store *st;
  CHECK_OK(store_open(&st, held, NULL, &e), &e);
  refused(held, STORE_EBUSY, NULL, "held by this process:");
  int rc = child_open(argv[0], held, NULL);
  CHECK(rc == STORE_EBUSY, "held by another process: the child got %d (%s)", rc, store_err_name(rc));
  printf("%-28s the child got %s\n", "held by another process:", store_err_name(rc));
  store_close(st);
  CHECK(child_open(argv[0], held, NULL) == 0, "once closed, another process opens it");

  const char *file = tmp_path("a-file");
  FILE *f = fopen(file, "w");
  CHECK(f && fputs("x", f) >= 0 && fclose(f) == 0, "cannot create %s", file);
  refused(file, ENG_EIO, "not a directory", "a regular file:");

  const char *locked = tmp_path("locked");
  CHECK(mkdir(locked, 0700) == 0, "mkdir %s", locked);
  if (geteuid() == 0) { // root reads anything: the child drops to nobody first
    rc = child_open(argv[0], locked, "65534");
    CHECK(rc == ENG_EIO, "an unreadable directory: the child got %d (%s)", rc, store_err_name(rc));
    printf("%-28s the child (uid 65534) got %s\n", "an unreadable directory:", store_err_name(rc));
  } else {
    CHECK(chmod(locked, 0) == 0, "chmod %s", locked);
    refused(locked, ENG_EIO, "Permission denied", "an unreadable directory:");
    CHECK(chmod(locked, 0700) == 0, "chmod %s", locked);
  }

  const char *future = tmp_path("future");
  make_store(future);
  raw_put(future, 4, "traind.format", "2");
  refused(future, STORE_EVERSION, "\"2\"", "an unknown format version:");

  const char *foreign = tmp_path("foreign");
  raw_put(foreign, 0, "some", "data");
  refused(foreign, STORE_EVERSION, "not a traind store", "a foreign RocksDB:");

  // What a process killed while creating a store leaves: some families, no data.
  const char *half = tmp_path("half-created");
  raw_put(half, 1, NULL, NULL);
  CHECK_OK(store_open(&st, half, NULL, &e), &e);
  CHECK_OK(store_job_put(st, "j", "r", 1, 0, 0, &e), &e);
  store_close(st);
  CHECK_OK(store_open(&st, half, NULL, &e), &e);
  store_close(st);
  printf("%-28s finished at open\n", "an interrupted creation:");

  const char *cur = tmp_path("current");
  make_store(cur);
  overwrite(find_file(cur, "CURRENT", ""), 0, "MANIFEST-99\xff", 12);
  CHECK(store_open(&st, cur, NULL, &e) < 0 && strstr(e.msg, cur), "a damaged CURRENT: %s", e.msg);
  printf("%-28s %s\n", "a damaged CURRENT:", e.msg);

  const char *man = tmp_path("manifest");
  make_store(man);
  const char *mf = find_file(man, "MANIFEST-", "");
  char junk[64];
  memset(junk, 0x5a, sizeof junk);
  overwrite(mf, file_size(mf) / 2, junk, sizeof junk);
  refused(man, STORE_ECORRUPT, NULL, "a damaged MANIFEST:");

  const char *sst = tmp_path("sst");
  make_store(sst);
  const char *sf = find_file(sst, "", ".sst");
  CHECK(truncate(sf, file_size(sf) / 2) == 0, "truncate %s", sf);
  refused(sst, STORE_ECORRUPT, NULL, "a truncated SST file:");

  tmp_cleanup();
  return 0;
}
