// Two hosts on this machine (issue 19): two network namespaces joined by a
// veth pair, one rank in each, MPI over TCP between them. The test makes the
// namespaces (root: the tests run as root; iproute2 from
// deploy/install-deps.sh), writes an rsh agent that Open MPI's launcher
// uses in place of ssh ("ssh HOST CMD" becomes "ip netns exec NS sh -c
// CMD"), runs `mpirun` inside the first namespace with a hostfile of the
// two addresses and only the TCP transport, and removes the namespaces at
// exit. The ranks train 30 steps at W = 2 (one micro-batch each) and the
// losses must be test_dist_train's: bit-identical to one process's.
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "dist/coll.h"
#include "dist/dist.h"
#include "launch.h"
#include "losses.h"
#include "tiny.h"

enum { STEPS = 30 };

static char ns[2][32], dir[64], sub[32];

static void spec_of(eng_spec *s) {
  tiny_spec(s, 2);
  s->micro_batches = 2;
  s->grad_dtype = ENG_GRAD_F32;
  s->total_steps = STEPS;
}

// Where a rank runs: its IPv4 addresses, to <DIST_OUT>.where.<rank>.
static void say_where(int rank) {
  char path[4200];
  snprintf(path, sizeof path, "%s.where.%d", getenv("DIST_OUT"), rank);
  FILE *f = fopen(path, "w");
  CHECK(f, "cannot write %s", path);
  struct ifaddrs *ifs;
  CHECK(getifaddrs(&ifs) == 0, "getifaddrs failed");
  for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
    char a[INET_ADDRSTRLEN];
    if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
        inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, a, sizeof a))
      fprintf(f, "%s\n", a);
  }
  freeifaddrs(ifs);
  fclose(f);
}

static int rank_main(void) {
  eng_coll *c = dist_rank_open();
  say_where(c->rank);
  eng_spec s;
  spec_of(&s);
  s.coll = c;
  double loss[STEPS];
  tiny_train(&s, loss, 0, STEPS, NULL, NULL, NULL);
  if (c->rank == 0) dist_losses_write(getenv("DIST_OUT"), loss, STEPS);
  c->ops->close(c);
  return 0;
}

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...) {
  char cmd[8192];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  fflush(stdout);
  int st = system(cmd);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void teardown(void) {
  for (int i = 0; i < 2; i++)
    if (*ns[i]) sh("ip netns del %s 2>/dev/null", ns[i]); // the veth goes with its namespace
  if (*dir) sh("rm -rf %s", dir);
}

int main(void) {
  eng_dist_env env;
  eng_err e = {0};
  CHECK_OK(eng_dist_env_read(&env, (const char *(*)(const char *))getenv, &e), &e);
  if (env.launcher != ENG_DIST_SINGLE) return rank_main();

  snprintf(dir, sizeof dir, "/tmp/test_dist_netns.XXXXXX");
  CHECK(mkdtemp(dir), "mkdtemp failed");
  atexit(teardown);
  int id = (int)getpid() % 250 + 1; // this run's names and subnet
  snprintf(sub, sizeof sub, "10.78.%d", id);
  for (int i = 0; i < 2; i++) snprintf(ns[i], sizeof ns[i], "tdn%d%c", (int)getpid(), 'a' + i);
  CHECK(sh("ip netns add %s && ip netns add %s", ns[0], ns[1]) == 0,
        "cannot make network namespaces (root and iproute2 are needed: run deploy/install-deps.sh as root)");
  CHECK(sh("ip link add tdv%da type veth peer name tdv%db && ip link set tdv%da netns %s && ip link set tdv%db netns "
           "%s && ip -n %s addr add %s.1/24 dev tdv%da && ip -n %s addr add %s.2/24 dev tdv%db && ip -n %s link set "
           "tdv%da up && ip -n %s link set tdv%db up && ip -n %s link set lo up && ip -n %s link set lo up",
           id, id, id, ns[0], id, ns[1], ns[0], sub, id, ns[1], sub, id, ns[0], id, ns[1], id, ns[0], ns[1]) == 0,
        "cannot join the namespaces with a veth pair");

  char agent[128], hosts[128], out[128], log[128];
  snprintf(agent, sizeof agent, "%s/agent.sh", dir);
  snprintf(hosts, sizeof hosts, "%s/hosts", dir);
  snprintf(out, sizeof out, "%s/loss", dir);
  snprintf(log, sizeof log, "%s/mpirun.log", dir);
  FILE *f = fopen(agent, "w");
  CHECK(f, "cannot write %s", agent);
  fprintf(f, "#!/bin/sh\n# Open MPI's rsh agent: \"ssh [opts] HOST CMD\" runs CMD in HOST's namespace.\n"
             "while [ $# -gt 0 ]; do case \"$1\" in -*) shift;; *) break;; esac; done\n"
             "case \"$1\" in %s.1) ns=%s;; %s.2) ns=%s;; *) echo \"agent: unknown host $1\" >&2; exit 1;; esac\n"
             "shift\nexec ip netns exec \"$ns\" sh -c \"$*\"\n",
          sub, ns[0], sub, ns[1]);
  fclose(f);
  CHECK(chmod(agent, 0755) == 0, "chmod %s", agent);
  f = fopen(hosts, "w");
  CHECK(f, "cannot write %s", hosts);
  fprintf(f, "%s.1 slots=1\n%s.2 slots=1\n", sub, sub);
  fclose(f);

  eng_spec s;
  spec_of(&s);
  double ref[STEPS], got[STEPS];
  tiny_train(&s, ref, 0, STEPS, NULL, NULL, NULL);

  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  CHECK(n > 0, "cannot find this program");
  self[n] = 0;
  dist_mpi_env();
  setenv("DIST_OUT", out, 1);
  setenv("OMP_NUM_THREADS", "1", 1);
  int rc = sh("ip netns exec %s mpirun --hostfile %s -np 2 --mca plm_rsh_agent %s --mca btl tcp,self "
              "--mca btl_tcp_if_include %s.0/24 --mca oob_tcp_if_include %s.0/24 -x DIST_OUT -x OMP_NUM_THREADS %s "
              "%s > %s 2>&1",
              ns[0], hosts, agent, sub, sub, getenv("TRAIND_CPU_GEMM") ? "-x TRAIND_CPU_GEMM" : "", self, log);
  if (rc) sh("cat %s", log);
  CHECK(rc == 0, "mpirun across the two namespaces exited %d (its output above)", rc);
  for (int r = 0; r < 2; r++) // each rank in its own namespace, which has only its end of the pair
    CHECK(sh("grep -qx %s.%d %s.where.%d && ! grep -qx %s.%d %s.where.%d", sub, r + 1, out, r, sub, 2 - r, out, r) == 0,
          "rank %d did not run in %s (its addresses: %s.where.%d)", r, ns[r], out, r);
  dist_losses_read(out, got, STEPS);
  int differ = 0;
  for (int i = 0; i < STEPS; i++) differ += memcmp(&got[i], &ref[i], sizeof got[i]) != 0;
  CHECK(differ == 0, "two hosts over TCP, W=2: %d of %d losses differ from one process's", differ, STEPS);
  printf("two namespaces (%s.1 in %s, %s.2 in %s), MPI over TCP, W=2: %d losses bit-identical to one process "
         "(%.6f -> %.6f)\nok\n",
         sub, ns[0], sub, ns[1], STEPS, got[0], got[STEPS - 1]);
  return 0;
}
