// Where a run stands in a distributed job (issue 19): its rank, the world
// size and its rank on this node, as the launcher that started it says.
// Launchers, in the order they are looked for:
// - Open MPI's mpirun: OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE;
// - MPICH/Hydra's mpiexec: PMI_RANK, PMI_SIZE (local rank: MPI_LOCALRANKID);
// - Slurm's srun: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID (local size:
//   SLURM_NTASKS_PER_NODE when it is one number);
// - the torchrun convention (Kubernetes indexed Jobs, torch.distributed):
//   RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT.
// None of them: one process, rank 0 of 1.
#ifndef ENG_DIST_DIST_H
#define ENG_DIST_DIST_H

#include "common/err.h"

typedef enum eng_dist_launcher {
  ENG_DIST_SINGLE = 0, // not launched as part of a job of several processes
  ENG_DIST_MPI,        // mpirun / mpiexec
  ENG_DIST_SLURM,      // srun
  ENG_DIST_TORCHRUN,   // RANK / WORLD_SIZE
} eng_dist_launcher;

typedef struct eng_dist_env {
  eng_dist_launcher launcher;
  int rank, world;             // 0 <= rank < world
  int local_rank, local_world; // on this node (local_world 0: not said)
  char master_addr[256];       // torchrun's rendezvous host ("" when not given)
  int master_port;             // and port (0 when not given)
} eng_dist_env;

// Reads the launcher's variables through get (getenv, or a test's table).
// ENG_EINVAL naming the variable when one is set but not a number in range
// (a rank past the world size, a world of 0, a port past 65535).
int eng_dist_env_read(eng_dist_env *out, const char *(*get)(const char *name), eng_err *e);

// "single", "mpi", "slurm", "torchrun".
const char *eng_dist_launcher_name(eng_dist_launcher l);

#endif
