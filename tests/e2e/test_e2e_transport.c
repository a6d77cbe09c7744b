// The transport against hostile and clumsy clients (issue 14), on a real
// daemon's Unix socket: HTTP/2 frames from a raw client (tests/e2e/h2flood.py)
// for a rapid-reset flood, too many streams and a 2 GiB length prefix, each
// holding the daemon's RSS within 64 MiB of its idle size; running out of
// descriptors, from which accepting recovers; the connection limit; and a
// second daemon on the same socket path, refused by name. After each the
// daemon still answers.
#define _GNU_SOURCE
#include "e2e/daemon.h"
#include "python.h"

static td t;

// The daemon answers GetNode on a fresh connection (trainctl node).
static void serves(const char *after) {
  char out[4096];
  CHECK(td_ctl(&t, out, sizeof out, "node") == 0, "after %s, trainctl node failed: %s", after, out);
  CHECK(strstr(out, "device cpu"), "after %s, trainctl node printed: %s", after, out);
}

typedef struct flood {
  long peak_kib, idle_kib, sent, refused, ended;
} flood;

static flood run_flood(const char *mode, int n) {
  char outp[700];
  snprintf(outp, sizeof outp, "%s/flood.out", tmp_root);
  int rc = py_run("%s/tests/e2e/h2flood.py %s %d %s %d > %s", TRAIND_SOURCE_DIR, t.sock, (int)t.pid, mode, n, outp);
  CHECK(rc == 0, "h2flood.py %s exited %d", mode, rc);
  FILE *f = fopen(outp, "r");
  CHECK(f, "no output from h2flood.py %s", mode);
  flood r;
  CHECK(fscanf(f, "peak_rss_kib %ld idle_rss_kib %ld sent %ld refused %ld ended %ld", &r.peak_kib, &r.idle_kib,
               &r.sent, &r.refused, &r.ended) == 5,
        "h2flood.py %s printed something else", mode);
  fclose(f);
  printf("%-8s sent %ld, refused %ld, connection ended %ld, RSS %ld -> %ld KiB (+%ld KiB)\n", mode, r.sent,
         r.refused, r.ended, r.idle_kib, r.peak_kib, r.peak_kib - r.idle_kib);
#ifndef __SANITIZE_ADDRESS__
  CHECK(r.peak_kib - r.idle_kib <= 64 * 1024, "%s: the daemon's RSS grew by %ld KiB (limit 64 MiB)", mode,
        r.peak_kib - r.idle_kib);
#else
  // Under ASan the loop handles calls tens of times slower, so the core
  // queues more of a flood before the listener closes the connection, and
  // freed memory sits in ASan's quarantine: the bound is the release
  // build's (the test's first run); here the flood must still end.
  printf("%s: RSS bound not checked under ASan\n", mode);
#endif
  return r;
}

static int connect_raw(void) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  memcpy(sa.sun_path, t.sock, strlen(t.sock) + 1);
  CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0, "connect %s: %s", t.sock, strerror(errno));
  return fd;
}

static void floods(void) {
  // HEADERS + RST_STREAM pairs: the connection is closed by the daemon.
  flood r = run_flood("reset", 100000);
  CHECK(r.ended, "the rapid-reset connection was not closed after %ld pairs", r.sent);
  int cut = td_log_count(&t, "HTTP/2 rapid reset");
#ifndef __SANITIZE_ADDRESS__
  CHECK(cut == 1, "no rapid-reset line in the log");
#else
  // The calls reach the counter at the completion-queue thread's pace, tens
  // of times slower here, while the core keeps parsing the flood, and the
  // core has been seen to close the connection first (with its resource
  // quota under pressure, 2 GB in).
  CHECK(cut <= 1, "%d rapid-reset lines for one connection", cut);
  printf("reset: closed by %s\n", cut ? "the rapid-reset counter" : "the core");
#endif
  serves("a rapid-reset flood");
  // Streams opened and kept: no more than max_streams (100) are let open.
  r = run_flood("streams", 3000);
  CHECK(r.sent <= 100, "%ld streams were let open on one connection (max_streams 100)", r.sent);
  serves("3000 streams");
  // A length prefix of 2 GiB: the stream is refused long before 256 MiB is in.
  r = run_flood("prefix", 256);
  CHECK(r.refused || r.ended, "a message claiming 2 GiB was taken in whole (%ld bytes)", r.sent);
  CHECK(r.sent < (64 << 20), "%ld bytes of a message claiming 2 GiB were taken before it was refused", r.sent);
  serves("a 2 GiB length prefix");
}

// Out of descriptors: connections that hold them all, then let go; the
// daemon accepts again.
static void emfile(void) {
  int fds[200], n = 0;
  while (n < 200 && td_log_count(&t, "accept: Too many open files") == 0) {
    fds[n++] = connect_raw();
    if (n % 10 == 0) usleep(20000); // let the daemon accept what came
  }
  td_wait_log(&t, "accept: Too many open files", 0, 60);
  printf("EMFILE after %d connections\n", n);
  for (int i = 0; i < n; i++) close(fds[i]);
  // The daemon sees them go and accepts again: the event is a call that works.
  double t0 = td_now();
  char out[4096];
  while (td_ctl(&t, out, sizeof out, "node") != 0) CHECK(td_now() - t0 < 120, "traind never accepted again");
  serves("running out of descriptors");
}

// What the daemon sends first on a connection: its HTTP/2 settings (> 0
// bytes), or nothing when it closes it (0).
static ssize_t first_bytes(int fd) {
  struct pollfd p = {fd, POLLIN, 0};
  CHECK(poll(&p, 1, 60000) == 1, "the daemon neither spoke nor closed a connection within 60 s");
  char buf[256];
  return read(fd, buf, sizeof buf);
}

// More connections than max_connections (4): the extra ones are closed at
// once, with one log line for the lot.
static void conn_limit(void) {
  int fds[8];
  for (int i = 0; i < 8; i++) fds[i] = connect_raw();
  for (int i = 0; i < 8; i++) {
    ssize_t n = first_bytes(fds[i]);
    CHECK(i < 4 ? n > 0 : n == 0, "connection %d of 8 (max_connections 4): read %zd", i + 1, n);
  }
  CHECK(td_log_count(&t, "connections open (max_connections)") == 1, "not one log line for the refusals");
  for (int i = 0; i < 8; i++) close(fds[i]);
  double t0 = td_now();
  char out[4096];
  while (td_ctl(&t, out, sizeof out, "node") != 0) CHECK(td_now() - t0 < 120, "traind never served again");
}

// A second daemon, its own state directory, the same socket: refused by name.
static void takeover(void) {
  char cmd[3000], log2[700];
  snprintf(log2, sizeof log2, "%s/second.log", tmp_root);
  snprintf(cmd, sizeof cmd, "%s --no-config --state-dir %s/state2 --socket %s > %s 2>&1", t.bin_traind, tmp_root,
           t.sock, log2);
  int st = system(cmd);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1, "a second daemon on the same socket exited %d", st);
  char buf[8192] = "";
  FILE *f = fopen(log2, "r");
  CHECK(f, "no log from the second daemon");
  buf[fread(buf, 1, sizeof buf - 1, f)] = 0;
  fclose(f);
  char want[64];
  snprintf(want, sizeof want, "another traind (pid %d) is serving it", (int)t.pid);
  CHECK(strstr(buf, want), "the second daemon did not say why: %s", buf);
  struct stat sst;
  CHECK(stat(t.sock, &sst) == 0 && S_ISSOCK(sst.st_mode), "the socket file is gone");
  serves("a second daemon tried the socket");
}

int main(void) {
  td_init(&t);
  t.nofile = 64;
  td_set(&t, "max_connections=1000");
  td_start(&t);
  serves("start");
  floods();
  takeover();
  emfile();
  td_finish(&t);

  td_init(&t);
  td_set(&t, "max_connections=4");
  td_start(&t);
  conn_limit();
  td_finish(&t);
  printf("ok\n");
  return 0;
}
