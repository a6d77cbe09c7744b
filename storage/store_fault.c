// Crash injection for the fault tests, in the style of a test hook armed
// from the environment: TRAIND_STORE_FAULT=<point>:<n> kills the process
// with SIGKILL the n-th time it reaches <point>. Unset, a point costs one
// comparison. Points (store_ckpt.c): ckpt_put (after each shard),
// ckpt_flush (after the last shard, before the flush), ckpt_manifest (after
// the flush, before the manifest), ckpt_done (after the manifest).
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "store_impl.h"

static char armed[64];
static long target;
static atomic_long hits;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void arm(void) {
  const char *v = getenv("TRAIND_STORE_FAULT");
  if (!v || sscanf(v, "%63[^:]:%ld", armed, &target) != 2 || target < 1) armed[0] = '\0';
}

void store_fault_point(const char *point) {
  pthread_once(&once, arm);
  if (armed[0] && !strcmp(point, armed) && atomic_fetch_add(&hits, 1) + 1 == target) kill(getpid(), SIGKILL);
}
