// Collectives of a distributed run (issue 19), behind one interface so that
// the engine reduces gradients and gathers weights the same way over MPI
// (the cpu backend) as over NCCL (the cuda backend); both take host buffers.
//
// Every reduction is deterministic and independent of the library's choice
// of algorithm: the result is the sum in rank order, rank 0 first, each
// addition in fp32 (bf16 inputs are widened, summed and rounded once to
// nearest even at the end; fp64 in fp64). So the same world size gives the same bits run
// after run, and a sum over ranks of one value each equals the sequential
// sum a single process takes over the same values in that order.
//
// Buffers of count elements; reduce_scatter and all_gather cut a buffer of
// count elements into world slices of ceil(count / world) elements (the
// last ones shorter, possibly empty): rank r owns slice r.
#ifndef ENG_DIST_COLL_H
#define ENG_DIST_COLL_H

#include <stddef.h>

#include "common/err.h"

// U8: bytes, gathered and broadcast only (optimizer state codes).
typedef enum eng_coll_dtype { ENG_COLL_F32, ENG_COLL_BF16, ENG_COLL_F64, ENG_COLL_U8 } eng_coll_dtype;

typedef struct eng_coll eng_coll;

typedef struct eng_coll_ops {
  // buf[count] becomes the sum over ranks of every rank's buf.
  int (*all_reduce)(eng_coll *c, void *buf, size_t count, eng_coll_dtype t, eng_err *e);
  // Slice `rank` of buf[count] becomes the sum over ranks of that slice of
  // every rank's buf; the rest of buf is left as it was.
  int (*reduce_scatter)(eng_coll *c, void *buf, size_t count, eng_coll_dtype t, eng_err *e);
  // Every slice r of buf[count] becomes rank r's slice r.
  int (*all_gather)(eng_coll *c, void *buf, size_t count, eng_coll_dtype t, eng_err *e);
  // The same with parts of the caller's choosing: part r, elements [off[r],
  // off[r] + n[r]) of buf, becomes rank r's (off and n alike on every rank).
  int (*all_gather_parts)(eng_coll *c, void *buf, const size_t *off, const size_t *n, eng_coll_dtype t, eng_err *e);
  // buf[count] becomes root's.
  int (*broadcast)(eng_coll *c, void *buf, size_t count, eng_coll_dtype t, int root, eng_err *e);
  int (*barrier)(eng_coll *c, eng_err *e);
  // Ends every rank of the job (the launcher kills the others and says
  // which rank gave up), for a rank that fails while the others may be
  // waiting for it inside a collective. Does not return.
  void (*abort)(eng_coll *c, int code);
  void (*close)(eng_coll *c);
} eng_coll_ops;

struct eng_coll {
  const eng_coll_ops *ops;
  int rank, world;
  void *impl;
};

// The slice of rank r: elements [*off, *off + *n) of count.
void eng_coll_slice(size_t count, int world, int r, size_t *off, size_t *n);
// Bytes of one element.
size_t eng_coll_dtype_bytes(eng_coll_dtype t);
// dst[n] = the sum of parts[world][n] over the ranks, in rank order, as the
// reductions above promise (F32, BF16, F64): every implementation moves the
// copies of a slice to its owner and sums them here, so the bits do not
// depend on the library that moved them.
void eng_coll_sum_ranks(void *dst, const void *parts, size_t n, int world, eng_coll_dtype t);
// The cost of c's all-reduce as the planner counts it (plan/profile.h
// comm_bps, comm_latency): the seconds of one on 16 values, and the rate of
// `calls` of them in a row, each on its own `bytes` of fp32 values (as a
// step sums its shards), beyond those seconds, as 2 (W - 1) / W of the
// buffers per second. Rank 0's medians of five (after one to warm up), the
// same on every rank. Every rank calls it.
int eng_coll_rate(eng_coll *c, size_t bytes, int calls, double *bps, double *latency, eng_err *e);

// MPI (the cpu backend): initialises MPI unless the process already did
// (threads: MPI_THREAD_SERIALIZED: one thread at a time calls c), over
// MPI_COMM_WORLD. ENG_ENOTSUP in a build without MPI.
int eng_coll_mpi_open(eng_coll **out, eng_err *e);

// NCCL (the cuda backend: one process per GPU, within a host or across
// hosts). The buffers are the host buffers the engine reduces, as over MPI:
// each operation copies its buffer to the GPU, moves the slices between the
// GPUs there (NVLink, PCIe, or NCCL's network transports), copies the
// result back, and sums in rank order on the host (eng_coll_sum_ranks).
// Rank 0 makes the id (ENG_COLL_NCCL_ID_BYTES) and every rank opens with
// it, handed out by the TCP rendezvous (dist/rendezvous.h). ENG_ENOTSUP in
// a build without CUDA and NCCL.
enum { ENG_COLL_NCCL_ID_BYTES = 128 };
int eng_coll_nccl_id(void *id, eng_err *e);
int eng_coll_nccl_open(eng_coll **out, int rank, int world, int device, const void *id, eng_err *e);

#endif
