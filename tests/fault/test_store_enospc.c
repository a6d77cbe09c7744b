// A full disk: the store lives on a 16 MiB tmpfs mounted by the test (exit
// 77 when mounting is not permitted). With the filesystem filled by a
// filler file, a checkpoint fails with an error naming ENOSPC and so does
// spilling; after each, the previous checkpoint still loads and resumes
// bit-identically, small writes still go through, and once space is freed
// the same store checkpoints and spills again.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "storage/store.h"
#include "tiny.h"
#include "unit/tmpdir.h"

static eng_err e;
static char mnt[600], filler[700];
static const char JOB[] = "full";
enum { FS_BYTES = 16 << 20, STEPS = 8 };

static void unmount(void) {
  umount2(mnt, MNT_DETACH);
  tmp_cleanup();
}

// Fills the filesystem with the filler file, then gives back `leave` bytes.
static void fill(size_t leave) {
  int fd = open(filler, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  CHECK(fd >= 0, "cannot create %s", filler);
  static char block[1 << 16];
  ssize_t w;
  while ((w = write(fd, block, sizeof block)) > 0) continue;
  CHECK(errno == ENOSPC, "filling %s: %s", filler, strerror(errno));
  off_t size = lseek(fd, 0, SEEK_END);
  CHECK(ftruncate(fd, size > (off_t)leave ? size - (off_t)leave : 0) == 0, "cannot shrink %s", filler);
  close(fd);
}

static double ref[STEPS + 1]; // losses of an uninterrupted run, by step (1-based)

// A fresh run resumed from the job's newest checkpoint: it must be at
// `step` and its next step must give the uninterrupted run's loss.
static void resumes_at(store *st, int64_t step) {
  eng_store es;
  CHECK_OK(store_engine_open(&es, st, JOB, 0, &e), &e);
  eng_spec s;
  tiny_spec(&s, 2);
  eng_run *r;
  CHECK_OK(eng_open(&s, &r, &e), &e);
  CHECK_OK(eng_load(r, &es, &e), &e);
  CHECK(eng_steps_done(r) == step, "resumed at step %lld, expected %lld", (long long)eng_steps_done(r),
        (long long)step);
  eng_metrics m;
  CHECK_OK(eng_step(r, &m, &e), &e);
  CHECK(m.loss == ref[step + 1], "step %lld after resuming: loss %.17g, expected %.17g", (long long)step + 1,
        m.loss, ref[step + 1]);
  eng_close(r);
  es.close(es.ctx);
}

static void spill_until_full(store *st) {
  static char v[1 << 20];
  int rc = 0, i;
  for (i = 0; i < 64 && !rc; i++) rc = store_act_put(st, JOB, 1, i, 0, v, sizeof v, &e);
  if (!rc) rc = store_act_flush(st, &e);
  CHECK(rc == STORE_ENOSPC && strstr(e.msg, "ENOSPC"), "spilling %d MiB onto a full disk should fail with "
        "ENOSPC (%d): %s", i, rc, e.msg);
  printf("spill onto a full disk (failed at MiB %d):\n  %s\n", i, e.msg);
}

int main(void) {
  tmp_make();
  snprintf(mnt, sizeof mnt, "%s", tmp_path("mnt"));
  snprintf(filler, sizeof filler, "%s/filler", mnt);
  CHECK(mkdir(mnt, 0755) == 0, "mkdir %s", mnt);
  char opts[64];
  snprintf(opts, sizeof opts, "size=%d", FS_BYTES);
  if (mount("tmpfs", mnt, "tmpfs", 0, opts)) {
    printf("skipped: cannot mount a %d MiB tmpfs on %s (%s); this test needs CAP_SYS_ADMIN\n", FS_BYTES >> 20,
           mnt, strerror(errno));
    tmp_cleanup();
    return 77;
  }
  atexit(unmount);

  eng_spec s;
  tiny_spec(&s, 2);
  eng_run *r;
  CHECK_OK(eng_open(&s, &r, &e), &e);
  for (int k = 1; k <= STEPS; k++) {
    eng_metrics m;
    CHECK_OK(eng_step(r, &m, &e), &e);
    ref[k] = m.loss;
  }
  eng_close(r);

  char db[700];
  snprintf(db, sizeof db, "%s/db", mnt);
  // 2 MiB act memtables: spill reaches the disk (and fails) while putting.
  store_options o;
  store_options_defaults(&o);
  o.act_buffer_bytes = 2 << 20;
  store *st;
  CHECK_OK(store_open(&st, db, &o, &e), &e);
  eng_store es;
  CHECK_OK(store_engine_open(&es, st, JOB, 0, &e), &e);
  CHECK_OK(eng_open(&s, &r, &e), &e);
  for (int k = 0; k < 2; k++) CHECK_OK(eng_step(r, NULL, &e), &e);
  CHECK_OK(eng_save(r, &es, &e), &e);

  // A checkpoint (about 1.5 MiB) onto a disk with 512 KiB left.
  fill(512 << 10);
  for (int k = 0; k < 2; k++) CHECK_OK(eng_step(r, NULL, &e), &e);
  int rc = eng_save(r, &es, &e);
  CHECK(rc == STORE_ENOSPC && strstr(e.msg, "ENOSPC") && strstr(e.msg, JOB), "a checkpoint onto a full disk "
        "should fail with ENOSPC naming the job (%d): %s", rc, e.msg);
  printf("checkpoint onto a full disk:\n  %s\n", e.msg);
  int64_t latest;
  CHECK_OK(store_ckpt_latest(st, JOB, &latest, &e), &e);
  CHECK(latest == 2, "the last complete checkpoint is still step 2 (%lld)", (long long)latest);
  CHECK_OK(store_ckpt_verify(st, JOB, 2, NULL, &e), &e);
  resumes_at(st, 2);
  CHECK_OK(store_event_put(st, JOB, 1, "still writable", 14, &e), &e);
  printf("after it: step 2 still verifies and resumes bit-identically; an event still appends\n");

  // Space back: the same store (and the same run) checkpoints again.
  CHECK(unlink(filler) == 0, "cannot remove %s", filler);
  CHECK_OK(eng_save(r, &es, &e), &e);
  CHECK_OK(store_ckpt_latest(st, JOB, &latest, &e), &e);
  CHECK(latest == 4, "the new checkpoint is step 4 (%lld)", (long long)latest);
  resumes_at(st, 4);
  printf("space freed: step 4 checkpoints and resumes bit-identically\n");

  // Spill onto a full disk.
  fill(1 << 20);
  spill_until_full(st);
  CHECK_OK(store_ckpt_verify(st, JOB, 4, NULL, &e), &e);
  resumes_at(st, 4);
  CHECK(unlink(filler) == 0, "cannot remove %s", filler);
  static char v[1 << 20];
  CHECK_OK(store_act_put(st, JOB, 2, 0, 0, v, sizeof v, &e), &e);
  CHECK_OK(store_act_flush(st, &e), &e);
  CHECK_OK(store_act_get(st, JOB, 2, 0, 0, v, sizeof v, &e), &e);
  CHECK_OK(store_act_drop(st, JOB, 2, &e), &e);
  printf("after it: step 4 still verifies and resumes; with space freed spilling works again\n");

  eng_close(r);
  es.close(es.ctx);
  store_close(st);
  return 0;
}
