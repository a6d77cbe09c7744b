// The daemon on a full disk (issue 14: nothing lost): its state directory
// on a 64 MiB tmpfs the test mounts and fills. A SubmitJob made then is not
// answered (the group commit retries the round, daemon/commit.h) until space
// comes back; then it is answered, the job runs, and after a restart the job
// is there. The daemon never exits meanwhile.
#define _GNU_SOURCE
#include <sys/mount.h>

#include "e2e/daemon.h"

static td t;
static char mnt[400], filler[500], submit_out[4096];
static int submit_rc = -1;
static volatile int submit_done;

static void unmount(void) { umount2(mnt, MNT_DETACH); }

static void fill(void) {
  int fd = open(filler, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  CHECK(fd >= 0, "cannot create %s", filler);
  static char block[1 << 16];
  while (write(fd, block, sizeof block) > 0) continue;
  CHECK(errno == ENOSPC, "filling %s: %s", filler, strerror(errno));
  close(fd);
}

static void *submit(void *jobfile) {
  submit_rc = td_ctl(&t, submit_out, sizeof submit_out, "--timeout 600 submit %s --request-id full-1", (char *)jobfile);
  submit_done = 1;
  return NULL;
}

int main(void) {
  td_init(&t);
  snprintf(mnt, sizeof mnt, "%s/mnt", tmp_root);
  CHECK(mkdir(mnt, 0755) == 0, "mkdir %s", mnt);
  CHECK(mount("tmpfs", mnt, "tmpfs", 0, "size=64m") == 0, "mount a tmpfs at %s: %s (the test runs as root)", mnt,
        strerror(errno));
  atexit(unmount);
  snprintf(filler, sizeof filler, "%s/filler", mnt);
  snprintf(t.state, sizeof t.state, "%s/state", mnt);
  snprintf(t.sock, sizeof t.sock, "%s/traind.sock", tmp_root); // the socket is no file to fill
  td_arg(&t, "--socket");
  td_arg(&t, t.sock);
  td_start(&t);
  const char *jf = td_jobfile("full.yaml", 3, 3, NULL);

  fill();
  pthread_t th;
  CHECK(pthread_create(&th, NULL, submit, (void *)jf) == 0, "pthread_create");
  td_wait_log(&t, "retrying the job table's writes until it works", 0, 120);
  CHECK(!submit_done, "a submission was answered while its record could not be written: exit %d, %s", submit_rc,
        submit_out);

  CHECK(unlink(filler) == 0, "rm %s", filler);
  td_wait_log(&t, "the job table's writes go through again", 0, 120);
  pthread_join(th, NULL);
  CHECK(submit_rc == 0 && submit_out[0] == 'j', "the submission after space came back: exit %d, %s", submit_rc,
        submit_out);
  char id[80];
  CHECK(sscanf(submit_out, "%79s", id) == 1, "no job id: %s", submit_out);
  td_wait_success(&t, id, 120);

  // Stored: a restarted daemon has it, and a retry is answered with it.
  CHECK(td_stop(&t, SIGTERM, 60, NULL) == 0, "traind did not exit 0 on SIGTERM");
  td_start(&t);
  char out[4096];
  CHECK(td_ctl(&t, out, sizeof out, "submit %s --request-id full-1", jf) == 0 && !strncmp(out, id, strlen(id)),
        "after a restart the retry of %s answered %s", id, out);
  CHECK(td_stop(&t, SIGTERM, 60, NULL) == 0, "traind did not exit 0 on SIGTERM");
  unmount(); // before the temporary directory goes
  td_finish(&t);
  printf("full disk: the submission waited for space, was answered after it, and survived a restart\n");
  return 0;
}
