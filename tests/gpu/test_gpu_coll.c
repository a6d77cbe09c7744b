// The NCCL collectives (dist/coll.h, backend/cuda/coll_nccl.c) between two
// processes, one GPU each, that meet through the TCP rendezvous on loopback
// as a torchrun-style job would: every operation's result against the
// rank-order sum the MPI collectives give (eng_coll_sum_ranks), bit for
// bit, for fp32, bf16 and fp64; gathers of even and uneven parts; a
// broadcast from rank 1; a barrier. Needs two GPUs (skipped with the reason
// on fewer). The ranks are this program again, exec'd, so that no CUDA state
// crosses a fork.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "port.h"
#include "common/bf16.h"
#include "dist/coll.h"
#include "dist/rendezvous.h"
#include "backend/cuda.h"

enum { WORLD = 2, COUNT = 100003 }; // odd: the last slice is shorter


// Rank r's value at i, of each type: values whose sums round.
static void fill(void *buf, size_t n, eng_coll_dtype t, int r) {
  for (size_t i = 0; i < n; i++) {
    double v = (double)((i * 2654435761u + (size_t)r * 40503u) % 100003) / 7919.0 - 6.0 + r * 1e-3;
    if (t == ENG_COLL_F32) ((float *)buf)[i] = (float)v;
    else if (t == ENG_COLL_F64) ((double *)buf)[i] = v;
    else ((uint16_t *)buf)[i] = eng_bf16_from_f32((float)v);
  }
}

// What every rank's buf must hold after an all-reduce: the rank-order sum.
static void *expected_sum(eng_coll_dtype t) {
  size_t es = eng_coll_dtype_bytes(t);
  char *parts = malloc((size_t)WORLD * COUNT * es), *sum = malloc(COUNT * es);
  CHECK(parts && sum, "out of memory");
  for (int r = 0; r < WORLD; r++) fill(parts + (size_t)r * COUNT * es, COUNT, t, r);
  eng_coll_sum_ranks(sum, parts, COUNT, WORLD, t); // parts[r][i]: one slice of the whole buffer
  free(parts);
  return sum;
}

static int rank_main(int rank, int port) {
  eng_err e = {0};
  int gpus = eng_dev_cuda_count(&e);
  if (gpus < WORLD) {
    fprintf(stderr, "test_gpu_coll: SKIP: %d GPUs needed, this machine has %d%s%s\n", WORLD, gpus < 0 ? 0 : gpus,
            gpus < 0 ? ": " : "", gpus < 0 ? e.msg : "");
    return 77;
  }
  eng_dist_env env = {.launcher = ENG_DIST_TORCHRUN, .rank = rank, .world = WORLD, .master_port = port};
  snprintf(env.master_addr, sizeof env.master_addr, "127.0.0.1");
  unsigned char id[ENG_COLL_NCCL_ID_BYTES] = {0};
  if (rank == 0) CHECK_OK(eng_coll_nccl_id(id, &e), &e);
  CHECK_OK(eng_dist_rendezvous(&env, id, sizeof id, 60, &e), &e);
  eng_coll *c;
  CHECK_OK(eng_coll_nccl_open(&c, rank, WORLD, rank, id, &e), &e);

  const eng_coll_dtype types[] = {ENG_COLL_F32, ENG_COLL_BF16, ENG_COLL_F64};
  for (int k = 0; k < 3; k++) {
    eng_coll_dtype t = types[k];
    size_t es = eng_coll_dtype_bytes(t);
    char *buf = malloc(COUNT * es), *want = expected_sum(t);
    CHECK(buf, "out of memory");
    fill(buf, COUNT, t, rank);
    CHECK_OK(c->ops->all_reduce(c, buf, COUNT, t, &e), &e);
    CHECK(!memcmp(buf, want, COUNT * es), "rank %d: all_reduce of type %d is not the rank-order sum", rank, t);
    // reduce_scatter: this rank's slice is the sum, the rest as it was.
    fill(buf, COUNT, t, rank);
    CHECK_OK(c->ops->reduce_scatter(c, buf, COUNT, t, &e), &e);
    size_t off, n;
    eng_coll_slice(COUNT, WORLD, rank, &off, &n);
    char *mine = malloc(COUNT * es);
    fill(mine, COUNT, t, rank);
    CHECK(!memcmp(buf + off * es, want + off * es, n * es), "rank %d: reduce_scatter's slice (type %d)", rank, t);
    CHECK(!memcmp(buf, mine, off * es) && !memcmp(buf + (off + n) * es, mine + (off + n) * es, (COUNT - off - n) * es),
          "rank %d: reduce_scatter changed what is not its slice", rank);
    // all_gather: each slice from its owner.
    memset(buf, 0x5a, COUNT * es);
    memcpy(buf + off * es, want + off * es, n * es);
    CHECK_OK(c->ops->all_gather(c, buf, COUNT, t, &e), &e);
    CHECK(!memcmp(buf, want, COUNT * es), "rank %d: all_gather (type %d)", rank, t);
    free(mine);
    free(want);
    free(buf);
  }

  // Uneven parts of bytes, then a broadcast from rank 1 and a barrier.
  size_t poff[WORLD] = {0, 17}, pn[WORLD] = {17, 983};
  unsigned char bytes[1000], bwant[1000];
  for (int i = 0; i < 1000; i++) bwant[i] = (unsigned char)(i < 17 ? i * 3 : 255 - i % 200);
  memset(bytes, 0, sizeof bytes);
  memcpy(bytes + poff[rank], bwant + poff[rank], pn[rank]);
  CHECK_OK(c->ops->all_gather_parts(c, bytes, poff, pn, ENG_COLL_U8, &e), &e);
  CHECK(!memcmp(bytes, bwant, sizeof bytes), "rank %d: all_gather_parts", rank);
  double d[3] = {rank ? 1.5 : 0, rank ? -2.25 : 0, rank ? 1e300 : 0};
  CHECK_OK(c->ops->broadcast(c, d, 3, ENG_COLL_F64, 1, &e), &e);
  CHECK(d[0] == 1.5 && d[1] == -2.25 && d[2] == 1e300, "rank %d: broadcast from rank 1", rank);
  CHECK_OK(c->ops->barrier(c, &e), &e);
  c->ops->close(c);
  printf("rank %d: all_reduce, reduce_scatter, all_gather (fp32, bf16, fp64), parts, broadcast, barrier: ok\n", rank);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 3) return rank_main(atoi(argv[1]), atoi(argv[2]));
  char self[4096], port[16];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  CHECK(len > 0, "cannot find this program");
  self[len] = '\0';
  snprintf(port, sizeof port, "%d", free_port());
  pid_t pid[WORLD];
  for (int r = 0; r < WORLD; r++) {
    char rs[8];
    snprintf(rs, sizeof rs, "%d", r);
    fflush(stdout);
    pid[r] = fork();
    CHECK(pid[r] >= 0, "fork");
    if (!pid[r]) {
      execl(self, self, rs, port, (char *)NULL);
      _exit(127);
    }
  }
  int skipped = 0;
  for (int r = 0; r < WORLD; r++) {
    int st;
    CHECK(waitpid(pid[r], &st, 0) == pid[r], "waitpid");
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    skipped += code == 77;
    CHECK(code == 0 || code == 77, "rank %d exited %d", r, code);
  }
  if (skipped) return 77; // each rank said why
  printf("test_gpu_coll: ok\n");
  return 0;
}
