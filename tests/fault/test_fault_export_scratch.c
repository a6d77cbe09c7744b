// An export cut short by the daemon's death (kill -9) leaves its directory
// under <state_dir>/export; the next daemon removes it at startup, and
// exports afterwards work and leave nothing behind.
#define _GNU_SOURCE
#include <dirent.h>

#include "e2e/daemon.h"

static int entries(const char *dir) {
  DIR *d = opendir(dir);
  CHECK(d, "opendir %s", dir);
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d))) n += de->d_name[0] != '.';
  closedir(d);
  return n;
}

int main(void) {
  td t;
  char a[80];
  td_ran_and_killed(&t, "export.yaml", a, sizeof a);

  // What an export killed mid-way leaves: its directory, a file half written.
  char scratch[700], dir[800], file[900];
  snprintf(scratch, sizeof scratch, "%s/export", t.state);
  snprintf(dir, sizeof dir, "%s/%s-Ab12Cd", scratch, a);
  snprintf(file, sizeof file, "%s/model.safetensors", dir);
  CHECK(mkdir(dir, 0750) == 0, "mkdir %s", dir);
  FILE *f = fopen(file, "w");
  CHECK(f && fputs("half a safetensors file", f) >= 0 && fclose(f) == 0, "write %s", file);
  CHECK(entries(scratch) == 1, "the planted directory is not there");

  td_start(&t);
  CHECK(entries(scratch) == 0, "%s still holds %d entries after the restart", scratch, entries(scratch));
  CHECK(td_log_count(&t, "removed 1 export leftover in ") == 1, "no log line for the removal (see %s)", t.log);
  char out[1 << 16];
  CHECK(td_ctl(&t, out, sizeof out, "export %s %s", a, tmp_path("out")) == 0, "trainctl export %s failed", a);
  CHECK(entries(scratch) == 0, "an export left %d entries in %s", entries(scratch), scratch);
  printf("the leftover export directory was removed at startup; a new export works and leaves none\n");
  td_finish(&t);
  return 0;
}
