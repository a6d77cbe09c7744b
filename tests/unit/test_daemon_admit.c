// Memory admission's cgroup v2 side (daemon/admit.c) on a made-up
// hierarchy: the daemon's cgroup and those above it, the least room wins,
// "max" is no limit, a hybrid host's v2 part is found under its second
// mount, and no cgroup v2 (or none with a limit) means no cgroup figure.
// The real /proc/self/cgroup of a test machine is rarely a v2 one with a
// limit, so the files are the test's own.
#define _XOPEN_SOURCE 700
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "admit.h"
#include "check.h"
#include "unit/tmpdir.h"

static void put(const char *rel, const char *text) {
  FILE *f = fopen(tmp_path(rel), "w");
  CHECK(f && fputs(text, f) >= 0 && fclose(f) == 0, "write %s", rel);
}

static void dir(const char *rel) { CHECK(mkdir(tmp_path(rel), 0755) == 0, "mkdir %s", rel); }

int main(void) {
  tmp_make();
  char v1[600], v2[600], proc[600];
  snprintf(v1, sizeof v1, "%s", tmp_path("v1"));
  snprintf(v2, sizeof v2, "%s", tmp_path("v2"));
  snprintf(proc, sizeof proc, "%s", tmp_path("cgroup"));
  dir("v1");
  dir("v2");
  dir("v2/system.slice");
  dir("v2/system.slice/traind.service");
  // A 2 GiB limit on the slice with 1.5 GiB in use; the service's own
  // limit is larger and its use small: the slice leaves the least room.
  put("v2/system.slice/memory.max", "2147483648\n");
  put("v2/system.slice/memory.current", "1610612736\n");
  put("v2/system.slice/traind.service/memory.max", "4294967296\n");
  put("v2/system.slice/traind.service/memory.current", "104857600\n");
  put("cgroup", "12:memory:/system.slice/traind.service\n0::/system.slice/traind.service\n");

  const char *const hybrid[] = {v1, v2};
  admit_cgroup cg;
  CHECK(admit_cgroup_room(proc, hybrid, 2, &cg) == 0, "no room found");
  char want[700];
  snprintf(want, sizeof want, "%s/system.slice", v2);
  CHECK(!strcmp(cg.dir, want) && cg.max == 2147483648 && cg.current == 1610612736,
        "least room: %s %lld - %lld, expected the slice's", cg.dir, (long long)cg.max, (long long)cg.current);

  // The service's own limit tighter: it wins.
  put("v2/system.slice/traind.service/memory.max", "209715200\n");
  CHECK(admit_cgroup_room(proc, hybrid + 1, 1, &cg) == 0, "no room found");
  snprintf(want, sizeof want, "%s/system.slice/traind.service", v2);
  CHECK(!strcmp(cg.dir, want) && cg.max - cg.current == 104857600, "least room: %s %lld - %lld", cg.dir,
        (long long)cg.max, (long long)cg.current);

  // No limit anywhere ("max" reads as none).
  put("v2/system.slice/traind.service/memory.max", "max\n");
  put("v2/system.slice/memory.max", "max\n");
  CHECK(admit_cgroup_room(proc, hybrid, 2, &cg) == -1, "a room found without a limit: %s", cg.dir);

  // Cgroup v1 only (no 0:: line), the root cgroup, no file at all.
  put("cgroup", "4:memory:/process_api/x\n");
  CHECK(admit_cgroup_room(proc, hybrid, 2, &cg) == -1, "a room found on cgroup v1");
  put("cgroup", "0::/\n");
  CHECK(admit_cgroup_room(proc, hybrid, 2, &cg) == -1, "a room found for the root cgroup");
  CHECK(admit_cgroup_room(tmp_path("none"), hybrid, 2, &cg) == -1, "a room found without a cgroup file");
  printf("cgroup v2 room: the tightest limit up the hierarchy, found under a hybrid host's second mount\n");
  tmp_cleanup();
  return 0;
}
