// The collectives over NCCL (dist/coll.h): host buffers in and out, the data
// moved between the ranks' GPUs by NCCL, sums taken on the host in rank
// order by the code the MPI collectives use. An operation copies its buffer
// to this rank's GPU, exchanges slices there in one NCCL group (point to
// point sends and receives, or broadcasts for gathers), copies the result
// back and waits for it: the same blocking contract as MPI's.
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist/coll.h"

_Static_assert(ENG_COLL_NCCL_ID_BYTES == NCCL_UNIQUE_ID_BYTES, "the NCCL unique id's size");

typedef struct nccl_coll {
  eng_coll c;
  ncclComm_t comm;
  cudaStream_t stream;
  int device;
  void *dbuf;            // the operation's buffer on the GPU
  size_t dbuf_bytes;
  void *dparts;          // world copies of this rank's slice, on the GPU
  void *hparts;          // and on the host
  size_t parts_bytes;
} nccl_coll;

static int cuda_fail(cudaError_t rc, const char *what, eng_err *e) {
  return eng_err_set(e, ENG_EDEVICE, "NCCL collectives: %s: %s", what, cudaGetErrorString(rc));
}

static int nccl_fail(ncclResult_t rc, const char *what, eng_err *e) {
  return eng_err_set(e, ENG_EIO, "NCCL %s failed: %s", what, ncclGetErrorString(rc));
}

#define CUDA_TRY(call, what)                                                                                     \
  do {                                                                                                           \
    cudaError_t rc_ = (call);                                                                                    \
    if (rc_ != cudaSuccess) return cuda_fail(rc_, what, e);                                                      \
  } while (0)
#define NCCL_TRY(call, what)                                                                                     \
  do {                                                                                                           \
    ncclResult_t rc_ = (call);                                                                                   \
    if (rc_ != ncclSuccess) return nccl_fail(rc_, what, e);                                                      \
  } while (0)

static ncclDataType_t ntype(eng_coll_dtype t) {
  return t == ENG_COLL_F64 ? ncclFloat64 : t == ENG_COLL_F32 ? ncclFloat32 : t == ENG_COLL_BF16 ? ncclBfloat16
                                                                                                : ncclUint8;
}

// Device (and host) room for an operation: its buffer, and world copies of
// a slice of `part` elements.
static int reserve(nccl_coll *m, size_t buf_bytes, size_t parts_bytes, eng_err *e) {
  CUDA_TRY(cudaSetDevice(m->device), "cudaSetDevice");
  if (buf_bytes > m->dbuf_bytes) {
    cudaFree(m->dbuf);
    m->dbuf = NULL;
    m->dbuf_bytes = 0;
    CUDA_TRY(cudaMalloc(&m->dbuf, buf_bytes), "cudaMalloc of a collective's buffer");
    m->dbuf_bytes = buf_bytes;
  }
  if (parts_bytes > m->parts_bytes) {
    cudaFree(m->dparts);
    free(m->hparts);
    m->dparts = m->hparts = NULL;
    m->parts_bytes = 0;
    CUDA_TRY(cudaMalloc(&m->dparts, parts_bytes), "cudaMalloc of a reduction's slices");
    if (!(m->hparts = malloc(parts_bytes))) return eng_err_set(e, ENG_ENOMEM, "NCCL collectives: out of memory");
    m->parts_bytes = parts_bytes;
  }
  return ENG_OK;
}

// buf -> GPU, the group queued by fill, GPU -> buf (bytes [lo, hi)), waited for.
static int around(nccl_coll *m, void *buf, size_t bytes, size_t lo, size_t hi,
                  int (*fill)(nccl_coll *m, void *arg, eng_err *e), void *arg, eng_err *e) {
  if (reserve(m, bytes ? bytes : 1, 0, e)) return e->code;
  CUDA_TRY(cudaMemcpyAsync(m->dbuf, buf, bytes, cudaMemcpyHostToDevice, m->stream), "copy to the GPU");
  NCCL_TRY(ncclGroupStart(), "ncclGroupStart");
  int rc = fill(m, arg, e);
  ncclResult_t g = ncclGroupEnd();
  if (rc) return rc;
  if (g != ncclSuccess) return nccl_fail(g, "ncclGroupEnd", e);
  if (hi > lo)
    CUDA_TRY(cudaMemcpyAsync((char *)buf + lo, (char *)m->dbuf + lo, hi - lo, cudaMemcpyDeviceToHost, m->stream),
             "copy from the GPU");
  CUDA_TRY(cudaStreamSynchronize(m->stream), "a collective");
  return ENG_OK;
}

typedef struct parts_arg {
  const size_t *off, *n;
  eng_coll_dtype t;
} parts_arg;

// Part r of the buffer is broadcast from rank r, in place.
static int fill_gather(nccl_coll *m, void *arg, eng_err *e) {
  const parts_arg *a = arg;
  size_t es = eng_coll_dtype_bytes(a->t);
  for (int r = 0; r < m->c.world; r++) {
    if (!a->n[r]) continue;
    char *p = (char *)m->dbuf + a->off[r] * es;
    NCCL_TRY(ncclBroadcast(p, p, a->n[r], ntype(a->t), r, m->comm, m->stream), "ncclBroadcast");
  }
  return ENG_OK;
}

static int nc_all_gather_parts(eng_coll *c, void *buf, const size_t *off, const size_t *n, eng_coll_dtype t,
                               eng_err *e) {
  nccl_coll *m = (nccl_coll *)c;
  size_t end = 0;
  for (int r = 0; r < c->world; r++)
    if (off[r] + n[r] > end) end = off[r] + n[r];
  size_t es = eng_coll_dtype_bytes(t);
  parts_arg a = {off, n, t};
  return around(m, buf, end * es, 0, end * es, fill_gather, &a, e);
}

// The slices of eng_coll_slice as parts.
static int slices(const eng_coll *c, size_t count, size_t **off, size_t **n, eng_err *e) {
  *off = malloc(2 * (size_t)c->world * sizeof **off);
  *n = NULL;
  if (!*off) return eng_err_set(e, ENG_ENOMEM, "NCCL collectives: out of memory");
  *n = *off + c->world;
  for (int r = 0; r < c->world; r++) eng_coll_slice(count, c->world, r, &(*off)[r], &(*n)[r]);
  return ENG_OK;
}

static int nc_all_gather(eng_coll *c, void *buf, size_t count, eng_coll_dtype t, eng_err *e) {
  size_t *off, *n;
  if (slices(c, count, &off, &n, e)) return e->code;
  int rc = nc_all_gather_parts(c, buf, off, n, t, e);
  free(off);
  return rc;
}

typedef struct scatter_arg {
  size_t count, mine;
  eng_coll_dtype t;
} scatter_arg;

// Every rank's slice r goes to rank r; this rank receives world copies of
// its own, in rank order.
static int fill_scatter(nccl_coll *m, void *arg, eng_err *e) {
  const scatter_arg *a = arg;
  size_t es = eng_coll_dtype_bytes(a->t);
  for (int r = 0; r < m->c.world; r++) {
    size_t o, k;
    eng_coll_slice(a->count, m->c.world, r, &o, &k);
    if (k) NCCL_TRY(ncclSend((char *)m->dbuf + o * es, k, ntype(a->t), r, m->comm, m->stream), "ncclSend");
    if (a->mine)
      NCCL_TRY(ncclRecv((char *)m->dparts + (size_t)r * a->mine * es, a->mine, ntype(a->t), r, m->comm, m->stream),
               "ncclRecv");
  }
  return ENG_OK;
}

static int nc_reduce_scatter(eng_coll *c, void *buf, size_t count, eng_coll_dtype t, eng_err *e) {
  nccl_coll *m = (nccl_coll *)c;
  if (t == ENG_COLL_U8) return eng_err_set(e, ENG_EINVAL, "collective: bytes are gathered and broadcast, not summed");
  size_t off, mine, es = eng_coll_dtype_bytes(t);
  eng_coll_slice(count, c->world, c->rank, &off, &mine);
  size_t parts = (size_t)c->world * mine * es;
  if (reserve(m, count ? count * es : 1, parts ? parts : 1, e)) return e->code;
  scatter_arg a = {count, mine, t};
  int rc = around(m, buf, count * es, 0, 0, fill_scatter, &a, e);
  if (rc) return rc;
  if (mine) {
    CUDA_TRY(cudaMemcpy(m->hparts, m->dparts, parts, cudaMemcpyDeviceToHost), "copy from the GPU");
    eng_coll_sum_ranks((char *)buf + off * es, m->hparts, mine, c->world, t);
  }
  return ENG_OK;
}

static int nc_all_reduce(eng_coll *c, void *buf, size_t count, eng_coll_dtype t, eng_err *e) {
  int rc = nc_reduce_scatter(c, buf, count, t, e);
  return rc ? rc : nc_all_gather(c, buf, count, t, e);
}

static int nc_broadcast(eng_coll *c, void *buf, size_t count, eng_coll_dtype t, int root, eng_err *e) {
  size_t *off, *n;
  if (slices(c, 0, &off, &n, e)) return e->code;
  off[root] = 0; // one part: the whole buffer, from root
  n[root] = count;
  int rc = nc_all_gather_parts(c, buf, off, n, t, e);
  free(off);
  return rc;
}

static int fill_barrier(nccl_coll *m, void *arg, eng_err *e) {
  (void)arg;
  NCCL_TRY(ncclAllReduce(m->dbuf, m->dbuf, 1, ncclFloat32, ncclSum, m->comm, m->stream), "ncclAllReduce");
  return ENG_OK;
}

static int nc_barrier(eng_coll *c, eng_err *e) {
  float one = 1;
  return around((nccl_coll *)c, &one, sizeof one, 0, 0, fill_barrier, NULL, e);
}

// No launcher stands behind a torchrun-style job to end the other ranks:
// aborting the communicator fails their operations with this one, and the
// job's controller (Kubernetes, torchrun) sees the exits.
static void nc_abort(eng_coll *c, int code) {
  ncclCommAbort(((nccl_coll *)c)->comm);
  _exit(code);
}

static void nc_close(eng_coll *c) {
  nccl_coll *m = (nccl_coll *)c;
  cudaSetDevice(m->device);
  ncclCommDestroy(m->comm);
  cudaStreamDestroy(m->stream);
  cudaFree(m->dbuf);
  cudaFree(m->dparts);
  free(m->hparts);
  free(m);
}

static const eng_coll_ops NCCL_OPS = {nc_all_reduce, nc_reduce_scatter, nc_all_gather, nc_all_gather_parts,
                                      nc_broadcast,  nc_barrier,        nc_abort,      nc_close};

int eng_coll_nccl_id(void *id, eng_err *e) {
  ncclUniqueId u;
  NCCL_TRY(ncclGetUniqueId(&u), "ncclGetUniqueId");
  memcpy(id, u.internal, sizeof u.internal);
  return ENG_OK;
}

int eng_coll_nccl_open(eng_coll **out, int rank, int world, int device, const void *id, eng_err *e) {
  *out = NULL;
  nccl_coll *m = calloc(1, sizeof *m);
  if (!m) return eng_err_set(e, ENG_ENOMEM, "NCCL collectives: out of memory");
  m->device = device;
  ncclUniqueId u;
  memcpy(u.internal, id, sizeof u.internal);
  cudaError_t ce = cudaSetDevice(device);
  if (ce == cudaSuccess) ce = cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking);
  if (ce != cudaSuccess) {
    free(m);
    return cuda_fail(ce, "opening the GPU for NCCL", e);
  }
  ncclResult_t rc = ncclCommInitRank(&m->comm, world, u, rank);
  if (rc != ncclSuccess) {
    cudaStreamDestroy(m->stream);
    free(m);
    return nccl_fail(rc, "ncclCommInitRank", e);
  }
  m->c = (eng_coll){&NCCL_OPS, rank, world, m};
  *out = &m->c;
  return ENG_OK;
}
