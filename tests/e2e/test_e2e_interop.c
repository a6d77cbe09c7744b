// Interop: two clients written from traind.proto alone (tests/e2e/interop.py)
// drive a real daemon: one on grpclib (pure Python HTTP/2, no code shared
// with the gRPC C core), one on grpcio (PyPI's build of the gRPC C core's
// Python binding), both on TRAIND_PYTHON. Each checks health (SERVING),
// submits, watches and cancels a job.
#define _GNU_SOURCE
#include "e2e/daemon.h"
#include "python.h"

static void run(td *t, const char *lib) {
  char desc[1100];
  snprintf(desc, sizeof desc, "%s", t->bin_traind);
  *strrchr(desc, '/') = 0; // <build>/daemon
  *strrchr(desc, '/') = 0; // <build>
  strncat(desc, "/proto/traind.desc", sizeof desc - strlen(desc) - 1);
  int rc = py_run("%s/tests/e2e/interop.py %s %s %s %s/data/demo/licenses.txt", TRAIND_SOURCE_DIR, lib, desc, t->sock,
                  TRAIND_SOURCE_DIR);
  CHECK(rc == 0, "the %s client failed (exit %d)", lib, rc);
}

int main(void) {
  td t;
  td_init(&t);
  td_start(&t);
  run(&t, "grpclib");
  run(&t, "grpcio");
  td_finish(&t);
  return 0;
}
