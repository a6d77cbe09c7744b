// The cuda backend (DESIGN §1, §2): backend.h's eng_dev on one GPU.
//
// - Arena: one cudaMalloc of exactly what eng_dev_reserve asks for (never
//   managed memory), under the cap given at open, which is also clamped to
//   the memory the GPU has free once the backend's own buffers are taken.
// - Streams: compute (the executor's kernels, through eng_dev_cuda_ctx),
//   copy-in and copy-out. ops->copy_in/copy_out queue their copy on their own
//   stream, so it overlaps compute, and return once it has landed: the cpu
//   backend's contract. Before copying, a copy waits (on the GPU, through an
//   event) for the compute work queued when it started, since compute is
//   asynchronous here: a slot the executor has released may still be read by
//   kernels in flight. The *_after variants wait for an earlier mark instead,
//   which lets the next slot's copy run beside the work queued after it.
// - Host memory: a source or destination that is pinned (eng_dev_cuda_pin,
//   eng_dev_cuda_host_alloc) is copied directly; pageable memory goes
//   through two pinned staging slabs per direction, so one slab's memcpy
//   overlaps the other's DMA.
// - Errors: the copy ops return nothing (backend.h), so their first error
//   is kept and returned by eng_dev_cuda_sync; every message carries
//   file:line and CUDA's reason. Without a driver or a GPU, opening fails
//   with ENG_EDEVICE and "no CUDA device: <reason>"; a build without CUDA
//   has stubs that fail with ENG_EDEVICE (ENG_DEV_NO_CUDA).
//
// Threads: the ops may be called from any thread (each direction is
// serialised). The thread that launches kernels on the compute stream calls
// eng_dev_cuda_use first, so the CUDA runtime targets this GPU there.
#ifndef ENG_BACKEND_CUDA_H
#define ENG_BACKEND_CUDA_H

#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(TRAIND_HAVE_CUDA)

#include "kernels/cuda/kernels_cuda.h"

// The CUDA devices: their count, or a negative ENG_EDEVICE with the reason;
// a device's name and memory. Neither takes device memory.
int eng_dev_cuda_count(eng_err *e);
int eng_dev_cuda_describe(int ordinal, char *name, size_t name_cap, size_t *memory_bytes, eng_err *e);

// Opens GPU `ordinal` with an arena cap of `cap` bytes (0: all that is free).
int eng_dev_open_cuda(eng_dev **out, int ordinal, size_t cap, eng_err *e);

// Makes the calling thread's CUDA calls target d's GPU.
int eng_dev_cuda_use(eng_dev *d, eng_err *e);

// The kernels' context on the compute stream (cuBLASLt, reduction scratch),
// owned by d.
eng_cuda_ctx *eng_dev_cuda_ctx(eng_dev *d);

typedef enum { ENG_CUDA_STREAM_COMPUTE, ENG_CUDA_STREAM_COPY_IN, ENG_CUDA_STREAM_COPY_OUT } eng_cuda_stream_kind;
eng_cuda_stream eng_dev_cuda_stream(eng_dev *d, eng_cuda_stream_kind k);

// Waits for the three streams; returns the first error of a copy or of
// the GPU since the last call.
int eng_dev_cuda_sync(eng_dev *d, eng_err *e);

// Page-locks host memory that crosses PCIe (the bf16 working copy, the
// gradient store, host checkpoints), or allocates it pinned.
int eng_dev_cuda_pin(eng_dev *d, void *p, size_t n, eng_err *e);
void eng_dev_cuda_unpin(eng_dev *d, void *p);
int eng_dev_cuda_host_alloc(eng_dev *d, void **p, size_t n, eng_err *e);
void eng_dev_cuda_host_free(void *p);

// A point in the compute stream's queue (a CUDA event).
typedef struct eng_cuda_mark {
  struct CUevent_st *ev;
} eng_cuda_mark;
int eng_dev_cuda_mark_init(eng_dev *d, eng_cuda_mark *m, eng_err *e);
// Marks the work queued on the compute stream so far.
int eng_dev_cuda_mark(eng_dev *d, eng_cuda_mark *m, eng_err *e);
void eng_dev_cuda_mark_free(eng_cuda_mark *m);
// ops->copy_in / copy_out that wait for mark m instead of for all queued compute.
void eng_dev_cuda_copy_in_after(eng_dev *d, const eng_cuda_mark *m, void *dst, const void *src, size_t n);
void eng_dev_cuda_copy_out_after(eng_dev *d, const eng_cuda_mark *m, void *dst, const void *src, size_t n);

#else

#define ENG_DEV_NO_CUDA "this build has no CUDA backend (nvcc was not found when it was configured)"

static inline int eng_dev_cuda_count(eng_err *e) { return eng_err_set(e, ENG_EDEVICE, ENG_DEV_NO_CUDA); }

static inline int eng_dev_cuda_describe(int ordinal, char *name, size_t name_cap, size_t *memory_bytes,
                                        eng_err *e) {
  (void)ordinal, (void)name, (void)name_cap, (void)memory_bytes;
  return eng_err_set(e, ENG_EDEVICE, ENG_DEV_NO_CUDA);
}

static inline int eng_dev_open_cuda(eng_dev **out, int ordinal, size_t cap, eng_err *e) {
  (void)ordinal;
  (void)cap;
  *out = NULL;
  return eng_err_set(e, ENG_EDEVICE, ENG_DEV_NO_CUDA);
}

#endif

#ifdef __cplusplus
}
#endif

#endif
