// The collectives over MPI (coll.h). MPI's own reductions may add in any
// order its algorithm picks, so reductions here move data with MPI and add
// themselves: each rank receives every rank's copy of the slice it owns
// (MPI_Alltoallv) and sums them in rank order; all_reduce then gathers the
// slices (MPI_Allgatherv).
#include "dist/coll.h"

#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#ifdef TRAIND_HAVE_MPI
#include <mpi.h>


typedef struct mpi_coll {
  eng_coll c;
  int *counts, *displs, *rcounts, *rdispls; // per rank, in elements
  void *scratch;                            // world copies of one slice
  size_t scratch_bytes;
  int we_init;                              // this module called MPI_Init
} mpi_coll;

static MPI_Datatype dtype(eng_coll_dtype t) {
  return t == ENG_COLL_F64 ? MPI_DOUBLE : t == ENG_COLL_F32 ? MPI_FLOAT : t == ENG_COLL_BF16 ? MPI_UINT16_T : MPI_BYTE;
}

static int mpi_fail(int rc, const char *what, eng_err *e) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return eng_err_set(e, ENG_EIO, "MPI %s failed: %.*s", what, len, msg);
}

// MPI counts are ints: refuse what they cannot say.
static int check_count(size_t count, eng_err *e) {
  if (count > (size_t)INT32_MAX)
    return eng_err_set(e, ENG_EINVAL, "collective of %zu elements: more than MPI counts", count);
  return ENG_OK;
}

// Sends every rank its slice of buf and receives world copies of ours,
// rank order, into scratch.
static int exchange(mpi_coll *m, const void *buf, size_t count, eng_coll_dtype t, size_t *mine, eng_err *e) {
  const int W = m->c.world;
  size_t off, n;
  eng_coll_slice(count, W, m->c.rank, &off, &n);
  *mine = n;
  size_t need = (size_t)W * (n ? n : 1) * eng_coll_dtype_bytes(t);
  if (need > m->scratch_bytes) {
    void *s = realloc(m->scratch, need);
    if (!s) return eng_err_set(e, ENG_ENOMEM, "cannot allocate %zu bytes for a reduction", need);
    m->scratch = s;
    m->scratch_bytes = need;
  }
  for (int r = 0; r < W; r++) {
    size_t o, k;
    eng_coll_slice(count, W, r, &o, &k);
    m->counts[r] = (int)k;
    m->displs[r] = (int)o;
    m->rcounts[r] = (int)n;
    m->rdispls[r] = (int)(n * (size_t)r);
  }
  int rc = MPI_Alltoallv(buf, m->counts, m->displs, dtype(t), m->scratch, m->rcounts, m->rdispls, dtype(t),
                         MPI_COMM_WORLD);
  return rc == MPI_SUCCESS ? ENG_OK : mpi_fail(rc, "Alltoallv", e);
}

// Our slice of buf becomes the rank-order sum of the copies in scratch.
static void sum_slice(mpi_coll *m, void *buf, size_t count, eng_coll_dtype t, size_t n) {
  size_t off, k;
  eng_coll_slice(count, m->c.world, m->c.rank, &off, &k);
  eng_coll_sum_ranks((char *)buf + off * eng_coll_dtype_bytes(t), m->scratch, n, m->c.world, t);
}

static int mpi_reduce_scatter(eng_coll *c, void *buf, size_t count, eng_coll_dtype t, eng_err *e) {
  mpi_coll *m = (mpi_coll *)c;
  size_t n;
  if (t == ENG_COLL_U8) return eng_err_set(e, ENG_EINVAL, "collective: bytes are gathered and broadcast, not summed");
  int rc = check_count(count, e);
  if (!rc) rc = exchange(m, buf, count, t, &n, e);
  if (!rc) sum_slice(m, buf, count, t, n);
  return rc;
}

static int mpi_all_gather(eng_coll *c, void *buf, size_t count, eng_coll_dtype t, eng_err *e) {
  mpi_coll *m = (mpi_coll *)c;
  int rc = check_count(count, e);
  if (rc) return rc;
  for (int r = 0; r < c->world; r++) {
    size_t o, k;
    eng_coll_slice(count, c->world, r, &o, &k);
    m->counts[r] = (int)k;
    m->displs[r] = (int)o;
  }
  rc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, m->counts, m->displs, dtype(t), MPI_COMM_WORLD);
  return rc == MPI_SUCCESS ? ENG_OK : mpi_fail(rc, "Allgatherv", e);
}

static int mpi_all_gather_parts(eng_coll *c, void *buf, const size_t *off, const size_t *n, eng_coll_dtype t,
                                eng_err *e) {
  mpi_coll *m = (mpi_coll *)c;
  for (int r = 0; r < c->world; r++) {
    int rc = check_count(off[r] + n[r], e);
    if (rc) return rc;
    m->counts[r] = (int)n[r];
    m->displs[r] = (int)off[r];
  }
  int rc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, m->counts, m->displs, dtype(t), MPI_COMM_WORLD);
  return rc == MPI_SUCCESS ? ENG_OK : mpi_fail(rc, "Allgatherv", e);
}

static int mpi_all_reduce(eng_coll *c, void *buf, size_t count, eng_coll_dtype t, eng_err *e) {
  int rc = mpi_reduce_scatter(c, buf, count, t, e);
  return rc ? rc : mpi_all_gather(c, buf, count, t, e);
}

static int mpi_broadcast(eng_coll *c, void *buf, size_t count, eng_coll_dtype t, int root, eng_err *e) {
  (void)c;
  int rc = check_count(count, e);
  if (rc) return rc;
  rc = MPI_Bcast(buf, (int)count, dtype(t), root, MPI_COMM_WORLD);
  return rc == MPI_SUCCESS ? ENG_OK : mpi_fail(rc, "Bcast", e);
}

static int mpi_barrier(eng_coll *c, eng_err *e) {
  (void)c;
  int rc = MPI_Barrier(MPI_COMM_WORLD);
  return rc == MPI_SUCCESS ? ENG_OK : mpi_fail(rc, "Barrier", e);
}

static void mpi_abort(eng_coll *c, int code) {
  (void)c;
  MPI_Abort(MPI_COMM_WORLD, code);
  _exit(code); // MPI_Abort does not return; should it, nothing more is to be done here
}

static void mpi_close(eng_coll *c) {
  mpi_coll *m = (mpi_coll *)c;
  if (m->we_init) MPI_Finalize();
  free(m->counts);
  free(m->scratch);
  free(m);
}

static const eng_coll_ops MPI_OPS = {mpi_all_reduce, mpi_reduce_scatter, mpi_all_gather, mpi_all_gather_parts,
                                     mpi_broadcast,  mpi_barrier,        mpi_abort,      mpi_close};

int eng_coll_mpi_open(eng_coll **out, eng_err *e) {
  *out = NULL;
  int inited = 0, provided;
  MPI_Initialized(&inited);
  if (!inited && MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
    return eng_err_set(e, ENG_EIO, "MPI_Init_thread failed");
  mpi_coll *m = calloc(1, sizeof *m);
  int W = 0, r = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &W);
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  if (m) m->counts = malloc(4 * (size_t)W * sizeof *m->counts);
  if (!m || !m->counts) {
    free(m);
    if (!inited) MPI_Finalize();
    return eng_err_set(e, ENG_ENOMEM, "cannot allocate the MPI collectives");
  }
  // Errors come back as codes, to be reported, not as an abort.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  m->displs = m->counts + W;
  m->rcounts = m->displs + W;
  m->rdispls = m->rcounts + W;
  m->we_init = !inited;
  m->c = (eng_coll){&MPI_OPS, r, W, m};
  *out = &m->c;
  return ENG_OK;
}

#else

int eng_coll_mpi_open(eng_coll **out, eng_err *e) {
  *out = NULL;
  return eng_err_set(e, ENG_ENOTSUP, "this build has no MPI (install libopenmpi-dev and rebuild)");
}

#endif
