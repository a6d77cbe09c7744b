// Every job is its caller's (issue 14): two real users of one daemon's Unix
// socket (uids 54321 and 54322, trainctl run under setpriv) see, watch,
// cancel and export their own jobs only; the other's job is NOT_FOUND, as an
// unknown id is; request ids are per user; root and the members of
// admin_group (gid 54330) see every job. A job's files are read with its
// owner's access: a user cannot train on a file of root's they cannot read.
#define _GNU_SOURCE
#include "e2e/daemon.h"

enum { ALICE = 54321, BOB = 54322, CAROL = 54323, ADMINS = 54330 };

static td t;

// trainctl as uid (primary group gid, no others); its exit code, stdout in out.
static int ctl_as(int uid, int gid, char *out, size_t n, const char *fmt, ...) {
  char args[2048], cmd[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  snprintf(cmd, sizeof cmd, "setpriv --reuid=%d --regid=%d --clear-groups env TRAIND_ADDR=%s %s %s 2>&1", uid, gid,
           t.sock, t.bin_trainctl, args);
  return td_run_out(cmd, out, n);
}

static const char *submit_as(int uid, const char *jobfile, const char *rid) {
  static char id[2][80];
  static int k;
  char out[4096];
  int rc = ctl_as(uid, uid, out, sizeof out, "submit %s --request-id %s", jobfile, rid);
  CHECK(rc == 0, "uid %d: trainctl submit exited %d: %s", uid, rc, out);
  k ^= 1;
  CHECK(sscanf(out, "%79s", id[k]) == 1 && id[k][0] == 'j', "uid %d: no job id from submit: %s", uid, out);
  return id[k];
}

// uid is told the job does not exist, by every method that names a job.
static void hidden_from(int uid, const char *id) {
  char out[4096], home[700], dir[800];
  snprintf(home, sizeof home, "%s/home-%d", tmp_root, uid); // where the user may write
  mkdir(home, 0755);
  CHECK(chown(home, (uid_t)uid, (gid_t)uid) == 0, "chown %s", home);
  snprintf(dir, sizeof dir, "%s/export", home);
  const char *cmds[] = {"show %s", "cancel %s", "logs %s", "watch %s", "export %s %s"};
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
    char c[1024];
    snprintf(c, sizeof c, cmds[i], id, dir);
    int rc = ctl_as(uid, uid, out, sizeof out, "%s", c);
    CHECK(rc != 0 && strstr(out, "NOT_FOUND"), "uid %d: trainctl %s of another user's job: exit %d: %s", uid, c, rc,
          out);
  }
  CHECK(access(dir, F_OK) != 0, "uid %d exported another user's job into %s", uid, dir);
}

int main(void) {
  td_init(&t);
  // The socket where other users reach it (the state directory is 0750).
  CHECK(chmod(tmp_root, 0755) == 0 && chmod(tmp_path("data"), 0755) == 0, "chmod %s", tmp_root);
  snprintf(t.sock, sizeof t.sock, "%s/traind.sock", tmp_root);
  td_arg(&t, "--socket");
  td_arg(&t, t.sock);
  td_set(&t, "socket_mode=0666");
  td_set(&t, "admin_group=54330");
  td_start(&t);

  const char *jf = td_jobfile("mine", 100000, 1000, "");
  CHECK(chmod(jf, 0644) == 0, "chmod %s", jf);
  char a[80], b[80], b2[80], out[16384];
  snprintf(a, sizeof a, "%s", submit_as(ALICE, jf, "same-rid"));
  snprintf(b, sizeof b, "%s", submit_as(BOB, jf, "same-rid"));
  CHECK(strcmp(a, b), "two users' submissions with one request id gave one job %s", a);
  snprintf(b2, sizeof b2, "%s", submit_as(BOB, jf, "same-rid"));
  CHECK(!strcmp(b, b2), "bob's retry with his request id gave a new job %s (first %s)", b2, b);

  // Each lists only its own; show says whose.
  CHECK(ctl_as(ALICE, ALICE, out, sizeof out, "list --all") == 0, "alice: list: %s", out);
  CHECK(strstr(out, a) && !strstr(out, b), "alice's list: %s", out);
  CHECK(ctl_as(BOB, BOB, out, sizeof out, "list --all") == 0, "bob: list: %s", out);
  CHECK(strstr(out, b) && !strstr(out, a), "bob's list: %s", out);
  CHECK(ctl_as(ALICE, ALICE, out, sizeof out, "show %s", a) == 0 && strstr(out, "owner      uid:54321"),
        "alice: show %s: %s", a, out);

  hidden_from(BOB, a);
  hidden_from(ALICE, b);
  // An unknown id gets the same answer, so ids say nothing about others.
  CHECK(ctl_as(ALICE, ALICE, out, sizeof out, "show j0000000000") != 0 && strstr(out, "NOT_FOUND"), "%s", out);

  // Admins see both: root, and a member of admin_group.
  CHECK(td_ctl(&t, out, sizeof out, "list --all") == 0 && strstr(out, a) && strstr(out, b), "root's list: %s", out);
  CHECK(ctl_as(CAROL, ADMINS, out, sizeof out, "list --all") == 0 && strstr(out, a) && strstr(out, b),
        "admin_group member's list: %s", out);
  CHECK(ctl_as(CAROL, CAROL, out, sizeof out, "list --all") == 0 && !strstr(out, a) && !strstr(out, b),
        "a user outside admin_group sees others' jobs: %s", out);

  // Each cancels its own.
  CHECK(ctl_as(ALICE, ALICE, out, sizeof out, "cancel %s", a) == 0, "alice: cancel her job: %s", out);
  CHECK(ctl_as(BOB, BOB, out, sizeof out, "cancel %s", b) == 0, "bob: cancel his job: %s", out);
  Traind__V1__Job *j = td_wait_done(&t, a, 120);
  CHECK(j->state == TRAIND__V1__JOB_STATE__JOB_STATE_CANCELLED, "alice's job ended %d", j->state);
  protobuf_c_message_free_unpacked(&j->base, NULL);
  j = td_wait_done(&t, b, 120);
  protobuf_c_message_free_unpacked(&j->base, NULL);

  // A 0600 file of root's under a data root: not alice's to train on; root's
  // job on it trains.
  char secret[700];
  snprintf(secret, sizeof secret, "%s/secret.txt", tmp_path("data"));
  td_sh("cp %s/data/demo/licenses.txt %s && chmod 0600 %s", TRAIND_SOURCE_DIR, secret, secret);
  const char *sj = td_jobfile_data("secret.yaml", TD_TINY_MODEL, secret, 3, 3, NULL);
  CHECK(chmod(sj, 0644) == 0, "chmod %s", sj);
  char sa[80];
  snprintf(sa, sizeof sa, "%s", submit_as(ALICE, sj, "secret"));
  Traind__V1__Job *js = td_wait_done(&t, sa, 120);
  CHECK(js->state == TRAIND__V1__JOB_STATE__JOB_STATE_FAILED && strstr(js->error, "not found under the data roots or not readable"),
        "alice's job on root's 0600 file ended %d: %s", js->state, js->error);
  protobuf_c_message_free_unpacked(&js->base, NULL);
  js = td_wait_done(&t, td_submit(&t, sj, NULL), 120);
  CHECK(js->state == TRAIND__V1__JOB_STATE__JOB_STATE_SUCCEEDED, "root's job on its own file ended %d: %s", js->state,
        js->error);
  protobuf_c_message_free_unpacked(&js->base, NULL);

  td_finish(&t);
  printf("ok\n");
  return 0;
}
