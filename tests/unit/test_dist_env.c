// engine/dist/dist.h: the rank, world and local rank each launcher's
// variables give, and the refusal of values that cannot be.
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "dist/dist.h"

static const char *const *g_vars; // NULL-terminated name, value pairs

static const char *get(const char *name) {
  for (const char *const *v = g_vars; v && *v; v += 2)
    if (!strcmp(*v, name)) return v[1];
  return NULL;
}

static eng_dist_env read_ok(const char *const *vars) {
  g_vars = vars;
  eng_dist_env d;
  eng_err e = {0};
  CHECK_OK(eng_dist_env_read(&d, get, &e), &e);
  return d;
}

static void read_bad(const char *const *vars, const char *want) {
  g_vars = vars;
  eng_dist_env d;
  eng_err e = {0};
  CHECK(eng_dist_env_read(&d, get, &e) == ENG_EINVAL && strstr(e.msg, want), "want \"%s\", got: %s", want, e.msg);
  printf("refused: %s\n", e.msg);
}

int main(void) {
  eng_dist_env d = read_ok((const char *const[]){NULL});
  CHECK(d.launcher == ENG_DIST_SINGLE && d.rank == 0 && d.world == 1, "no launcher: one process");

  d = read_ok((const char *const[]){"OMPI_COMM_WORLD_RANK", "3", "OMPI_COMM_WORLD_SIZE", "4",
                                    "OMPI_COMM_WORLD_LOCAL_RANK", "1", "OMPI_COMM_WORLD_LOCAL_SIZE", "2",
                                    "SLURM_PROCID", "0", "SLURM_NTASKS", "1", NULL});
  CHECK(d.launcher == ENG_DIST_MPI && d.rank == 3 && d.world == 4 && d.local_rank == 1 && d.local_world == 2,
        "mpirun (before slurm's variables): %s %d/%d local %d/%d", eng_dist_launcher_name(d.launcher), d.rank,
        d.world, d.local_rank, d.local_world);

  d = read_ok((const char *const[]){"PMI_RANK", "1", "PMI_SIZE", "2", NULL});
  CHECK(d.launcher == ENG_DIST_MPI && d.rank == 1 && d.world == 2 && d.local_world == 0, "mpiexec (hydra)");

  d = read_ok((const char *const[]){"SLURM_PROCID", "5", "SLURM_NTASKS", "8", "SLURM_LOCALID", "1",
                                    "SLURM_NTASKS_PER_NODE", "2(x4)", NULL});
  CHECK(d.launcher == ENG_DIST_SLURM && d.rank == 5 && d.world == 8 && d.local_rank == 1 && d.local_world == 0,
        "srun with an uneven task count");

  d = read_ok((const char *const[]){"RANK", "2", "WORLD_SIZE", "4", "LOCAL_RANK", "0", "LOCAL_WORLD_SIZE", "2",
                                    "MASTER_ADDR", "trainer-0.trainer", "MASTER_PORT", "29500", NULL});
  CHECK(d.launcher == ENG_DIST_TORCHRUN && d.rank == 2 && d.world == 4 && d.local_world == 2 &&
            !strcmp(d.master_addr, "trainer-0.trainer") && d.master_port == 29500,
        "torchrun variables");

  read_bad((const char *const[]){"RANK", "4", "WORLD_SIZE", "4", NULL}, "RANK=4 is not below WORLD_SIZE=4");
  read_bad((const char *const[]){"RANK", "0", NULL}, "RANK is set but WORLD_SIZE is not");
  read_bad((const char *const[]){"SLURM_PROCID", "x", "SLURM_NTASKS", "2", NULL}, "SLURM_PROCID=\"x\"");
  read_bad((const char *const[]){"RANK", "0", "WORLD_SIZE", "0", NULL}, "WORLD_SIZE=\"0\"");
  read_bad((const char *const[]){"RANK", "0", "WORLD_SIZE", "2", "MASTER_PORT", "70000", NULL}, "MASTER_PORT");
  read_bad((const char *const[]){"OMPI_COMM_WORLD_RANK", "1", "OMPI_COMM_WORLD_SIZE", "2",
                                 "OMPI_COMM_WORLD_LOCAL_RANK", "2", NULL},
           "OMPI_COMM_WORLD_LOCAL_RANK");
  printf("ok\n");
  return 0;
}
