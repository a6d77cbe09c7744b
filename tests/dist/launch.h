// The dist tests' launcher: the test program starts itself under
// `mpirun -np N` (oversubscribed on a small machine) and waits for it.
#ifndef TESTS_DIST_LAUNCH_H
#define TESTS_DIST_LAUNCH_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "dist/coll.h"

// What mpirun needs here: tests run as root on CI; shared memory without
// ptrace-based single copy, which containers often forbid; more ranks than
// cores.
static inline void dist_mpi_env(void) {
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 1);
  setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 1);
}

// mpirun's exit status (127: mpirun is missing), or 128 + its signal.
static inline int dist_launch(int np) {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  CHECK(n > 0, "cannot find this program");
  self[n] = '\0';
  fflush(stdout);
  pid_t pid = fork();
  CHECK(pid >= 0, "fork failed");
  if (pid == 0) {
    dist_mpi_env();
    char nps[16];
    snprintf(nps, sizeof nps, "%d", np);
    execlp("mpirun", "mpirun", "-np", nps, self, (char *)NULL);
    perror("mpirun");
    _exit(127);
  }
  int st;
  CHECK(waitpid(pid, &st, 0) == pid, "waitpid failed");
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// A rank's collectives (the test fails where MPI does not start).
static inline eng_coll *dist_rank_open(void) {
  eng_err e = {0};
  eng_coll *c;
  CHECK_OK(eng_coll_mpi_open(&c, &e), &e);
  return c;
}

#endif
