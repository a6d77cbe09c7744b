// Rank discovery from the launchers' environment variables (dist.h).
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dist.h"

const char *eng_dist_launcher_name(eng_dist_launcher l) {
  static const char *const names[] = {"single", "mpi", "slurm", "torchrun"};
  return names[l];
}

// The integer in variable name: 1 when set and in [lo, hi], 0 when unset,
// ENG_EINVAL otherwise.
static int get_int(const char *(*get)(const char *), const char *name, long lo, long hi, int *out, eng_err *e) {
  const char *s = get(name);
  if (!s) return 0;
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (!*s || *end || errno || v < lo || v > hi)
    return eng_err_set(e, ENG_EINVAL, "%s=\"%.32s\": not a whole number in [%ld, %ld]", name, s, lo, hi);
  *out = (int)v;
  return 1;
}

// The launcher's rank and size variables; 0 when rank_var is not set.
static int read_pair(const char *(*get)(const char *), const char *rank_var, const char *size_var,
                     eng_dist_env *out, eng_err *e) {
  int rc = get_int(get, rank_var, 0, 1 << 24, &out->rank, e);
  if (rc <= 0) return rc;
  int n = get_int(get, size_var, 1, 1 << 24, &out->world, e);
  if (n < 0) return n;
  if (n == 0) return eng_err_set(e, ENG_EINVAL, "%s is set but %s is not", rank_var, size_var);
  if (out->rank >= out->world)
    return eng_err_set(e, ENG_EINVAL, "%s=%d is not below %s=%d", rank_var, out->rank, size_var, out->world);
  return 1;
}

int eng_dist_env_read(eng_dist_env *out, const char *(*get)(const char *), eng_err *e) {
  memset(out, 0, sizeof *out);
  out->world = 1;
  static const struct {
    eng_dist_launcher l;
    const char *rank, *size, *local, *local_size;
  } vars[] = {
      {ENG_DIST_MPI, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
       "OMPI_COMM_WORLD_LOCAL_SIZE"},
      {ENG_DIST_MPI, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
      {ENG_DIST_SLURM, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
      {ENG_DIST_TORCHRUN, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
  };
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    int rc = read_pair(get, vars[i].rank, vars[i].size, out, e);
    if (rc < 0) return rc;
    if (!rc) continue;
    out->launcher = vars[i].l;
    if ((rc = get_int(get, vars[i].local, 0, out->world - 1, &out->local_rank, e)) < 0) return rc;
    // SLURM_NTASKS_PER_NODE may read "2(x3)" on uneven allocations: then
    // the local size is not known, which is allowed.
    const char *ls = get(vars[i].local_size);
    if (ls && strspn(ls, "0123456789") == strlen(ls) &&
        (rc = get_int(get, vars[i].local_size, 1, out->world, &out->local_world, e)) < 0)
      return rc;
    if (out->local_world && out->local_rank >= out->local_world)
      return eng_err_set(e, ENG_EINVAL, "%s=%d is not below %s=%d", vars[i].local, out->local_rank,
                         vars[i].local_size, out->local_world);
    if (out->launcher == ENG_DIST_TORCHRUN) {
      const char *addr = get("MASTER_ADDR");
      if (addr) snprintf(out->master_addr, sizeof out->master_addr, "%s", addr);
      if ((rc = get_int(get, "MASTER_PORT", 1, 65535, &out->master_port, e)) < 0) return rc;
    }
    return ENG_OK;
  }
  return ENG_OK;
}
