// The TCP rendezvous of torchrun-style launches (dist/rendezvous.h), with
// real processes on this host's loopback: four ranks, the others started
// before rank 0 (they retry until it listens), each ends up with rank 0's
// bytes; a rank with another world size is refused with the reason while
// the rest go on; a rank with no rank 0 gives up naming the address.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "port.h"
#include "dist/rendezvous.h"

enum { BLOB = 128, WORLD = 4 };

static void fill(unsigned char *b, int seed) {
  for (int i = 0; i < BLOB; i++) b[i] = (unsigned char)(seed * 31 + i * 7);
}

// A rank in a child process; its exit status says how it went (0: it holds
// rank 0's bytes; 2: refused, the reason on stderr; 3: other error).
static pid_t rank(int r, int world, int port, int wait_s, const char *expect_err) {
  pid_t pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid) return pid;
  eng_dist_env env = {.launcher = ENG_DIST_TORCHRUN, .rank = r, .world = world, .master_port = port};
  snprintf(env.master_addr, sizeof env.master_addr, "127.0.0.1");
  unsigned char blob[BLOB], want[BLOB];
  fill(want, 42);
  if (r == 0) memcpy(blob, want, BLOB);
  else fill(blob, r); // not rank 0's until the rendezvous
  eng_err e = {0};
  if (eng_dist_rendezvous(&env, blob, BLOB, wait_s, &e)) {
    fprintf(stderr, "rank %d: %s\n", r, e.msg);
    _exit(expect_err && strstr(e.msg, expect_err) ? 2 : 3);
  }
  _exit(memcmp(blob, want, BLOB) ? 4 : 0);
}

static int status_of(pid_t pid) {
  int st;
  CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int main(void) {
  int port = free_port();
  // Ranks 1 and 2 first: they find nobody listening and retry.
  pid_t p[WORLD + 1];
  for (int r = 1; r < WORLD - 1; r++) p[r] = rank(r, WORLD, port, 120, NULL);
  // A rank of a job of another size: refused, with the reason, while rank 0
  // waits for rank 3 (started once the refusal is in).
  p[WORLD] = rank(1, WORLD + 1, port, 120, "world size 5, rank 0's is 4");
  p[0] = rank(0, WORLD, port, 120, NULL);
  CHECK(status_of(p[WORLD]) == 2, "the rank of a world of 5 was not refused with the reason");
  p[WORLD - 1] = rank(WORLD - 1, WORLD, port, 120, NULL);
  for (int r = 0; r < WORLD; r++) CHECK(status_of(p[r]) == 0, "rank %d did not get rank 0's bytes", r);
  printf("4 ranks met at 127.0.0.1:%d; a rank of another world size was refused\n", port);

  // No rank 0: the others give up, naming where they looked.
  port = free_port();
  pid_t lone = rank(2, WORLD, port, 1, "found no rank 0 at 127.0.0.1");
  CHECK(status_of(lone) == 2, "a rank without rank 0 did not give up with the address");
  printf("test_dist_rendezvous: ok\n");
  return 0;
}
