// engine/common/fs_open: the file policy every file of a job is opened under.
// - beneath a root: a relative link that stays under it is followed; an
//   absolute link, a link out of it, a path outside every root and an absent
//   one all get the one answer;
// - a FIFO, a directory are refused by name, without blocking (a data set
//   on a FIFO too);
// - the caller's credentials (as root here: an unused uid 54321): a 0600
//   file of root's is refused, a 0644 one read, and this thread's fsuid,
//   fsgid and groups are root's again after each open.
#define _GNU_SOURCE // syscall, O_PATH

#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "check.h"
#include "common/fs_open.h"
#include "data/data.h"
#include "unit/tmpdir.h"

static void put(const char *path, const char *text, mode_t mode) {
  FILE *f = fopen(path, "w");
  CHECK(f && fputs(text, f) >= 0 && fclose(f) == 0, "cannot write %s", path);
  CHECK(chmod(path, mode) == 0, "chmod %s", path);
}

// Opens path under fs and reads its first bytes into buf; returns the code.
static int read_under(const eng_fs *fs, const char *path, char *buf, size_t n, eng_err *e) {
  int fd;
  int rc = eng_fs_open(fs, path, &fd, e);
  if (rc) return rc;
  ssize_t got = read(fd, buf, n - 1);
  close(fd);
  buf[got > 0 ? got : 0] = 0;
  return ENG_OK;
}

static void expect_refused(const eng_fs *fs, const char *path, const char *why) {
  eng_err e = {0};
  char buf[64];
  int rc = read_under(fs, path, buf, sizeof buf, &e);
  CHECK(rc == ENG_EIO && strstr(e.msg, path) && strstr(e.msg, why), "%s: code %d: %s (expected \"%s\")", path, rc,
        e.msg, why);
}

static void expect_read(const eng_fs *fs, const char *path, const char *text) {
  eng_err e = {0};
  char buf[64];
  CHECK_OK(read_under(fs, path, buf, sizeof buf, &e), &e);
  CHECK(!strcmp(buf, text), "%s: read \"%s\", expected \"%s\"", path, buf, text);
}

int main(void) {
  tmp_make();
  char root[600];
  snprintf(root, sizeof root, "%s", tmp_path("root"));
  CHECK(mkdir(root, 0755) == 0 && mkdir(tmp_path("root/sub"), 0755) == 0 && mkdir(tmp_path("root/blobs"), 0755) == 0,
        "mkdir");
  put(tmp_path("root/blobs/a"), "inside", 0644);
  put(tmp_path("root/secret"), "root only", 0600);
  put(tmp_path("out.txt"), "outside", 0644);
  CHECK(symlink("../blobs/a", tmp_path("root/sub/rel")) == 0, "symlink");
  CHECK(symlink(tmp_path("root/blobs/a"), tmp_path("root/abs_inside")) == 0, "symlink");
  CHECK(symlink(tmp_path("out.txt"), tmp_path("root/abs_out")) == 0, "symlink");
  CHECK(symlink("../out.txt", tmp_path("root/rel_out")) == 0, "symlink");
  CHECK(mkfifo(tmp_path("root/fifo"), 0644) == 0, "mkfifo");

  const char *roots[] = {root};
  eng_fs *fs;
  eng_err e = {0};
  CHECK_OK(eng_fs_new(&fs, roots, 1, &e), &e);
  expect_read(fs, tmp_path("root/blobs/a"), "inside");
  expect_read(fs, tmp_path("root/sub/rel"), "inside");
  expect_read(NULL, tmp_path("out.txt"), "outside"); // no policy: anything
  const char *refused[] = {"root/abs_inside", "root/abs_out", "root/rel_out", "out.txt", "root/absent", "root/../out.txt"};
  for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
    expect_refused(fs, tmp_path(refused[i]), ENG_FS_NOT_THERE);
  expect_refused(fs, tmp_path("root/fifo"), "is a FIFO, not a regular file");
  expect_refused(NULL, tmp_path("root/fifo"), "is a FIFO, not a regular file");
  expect_refused(fs, tmp_path("root/sub"), "is a directory, not a regular file");
  int fd;
  CHECK(eng_fs_open_opt(fs, tmp_path("root/absent"), &fd, &e) == 1, "an absent optional file: %s", e.msg);
  CHECK(!eng_fs_exists(fs, tmp_path("root/absent")) && eng_fs_exists(fs, tmp_path("root/abs_out")),
        "eng_fs_exists: only absence answers 0");
  eng_data *d;
  CHECK(eng_data_open(&d, fs, tmp_path("root/fifo"), 4, 256, 1, 1, &e) == ENG_EIO && strstr(e.msg, "is a FIFO"),
        "a data set on a FIFO: %s", e.msg);
  printf("beneath the root: relative links followed; absolute, escaping, outside and absent refused alike; "
         "FIFO and directory refused by name\n");

  // The caller's access. Tests run as root here; as another user the
  // credentials are not switched and the policy opens as that user.
  const gid_t groups[] = {54321};
  CHECK_OK(eng_fs_set_caller(fs, 54321, 54321, groups, 1, &e), &e);
  if (geteuid() == 0) {
    gid_t before[64], after[64];
    int nb = getgroups(64, before);
    expect_refused(fs, tmp_path("root/secret"), ENG_FS_NOT_THERE);
    expect_read(fs, tmp_path("root/blobs/a"), "inside");
    int na = getgroups(64, after);
    CHECK(syscall(SYS_setfsuid, (uid_t)-1) == 0 && syscall(SYS_setfsgid, (gid_t)-1) == 0,
          "fsuid/fsgid not restored after an open as the caller");
    CHECK(na == nb && !memcmp(before, after, (size_t)nb * sizeof *before), "supplementary groups not restored");
    expect_read(NULL, tmp_path("root/secret"), "root only"); // root's own access is back
    printf("as uid 54321: a 0600 root file refused, a 0644 one read; root's credentials restored\n");
  } else {
    expect_read(fs, tmp_path("root/secret"), "root only");
    printf("not root: the caller's credentials are not switched\n");
  }
  eng_fs_free(fs);
  tmp_cleanup();
  return 0;
}
