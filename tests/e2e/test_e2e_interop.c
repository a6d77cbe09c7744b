// Interop: two clients written from traind.proto alone (tests/e2e/interop.py)
// drive a real daemon: one on grpclib (pure Python HTTP/2, no code shared
// with the gRPC C core), one on Debian's python3-grpcio. Each checks health
// (SERVING), submits, watches and cancels a job. Exit 77 (skipped) when
// either library is not installed.
#define _GNU_SOURCE
#include "e2e/daemon.h"

static int run(td *t, const char *python, const char *lib) {
  char desc[1100], cmd[4000];
  snprintf(desc, sizeof desc, "%s", t->bin_traind);
  *strrchr(desc, '/') = 0; // <build>/daemon
  *strrchr(desc, '/') = 0; // <build>
  strncat(desc, "/proto/traind.desc", sizeof desc - strlen(desc) - 1);
  snprintf(cmd, sizeof cmd, "%s %s/tests/e2e/interop.py %s %s %s %s/data/demo/licenses.txt", python, TRAIND_SOURCE_DIR,
           lib, desc, t->sock, TRAIND_SOURCE_DIR);
  int st = system(cmd);
  CHECK(st != -1 && WIFEXITED(st), "cannot run %s", cmd);
  CHECK(WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == 77, "the %s client failed (exit %d)", lib, WEXITSTATUS(st));
  return WEXITSTATUS(st);
}

int main(void) {
  td t;
  td_init(&t);
  td_start(&t);
  int a = run(&t, "python3", "grpclib");
  // Debian's grpcio lives in the system interpreter's packages.
  int b = run(&t, access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3", "grpcio");
  td_finish(&t);
  return a == 77 || b == 77 ? 77 : 0; // one missing library: not "passed"
}
