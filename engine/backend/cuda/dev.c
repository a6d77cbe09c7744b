// The cuda backend's eng_dev (backend/cuda.h): a cudaMalloc arena, three
// streams, pinned staging. Plain C on the CUDA runtime's C API; the kernels'
// context (cuBLASLt) comes from kernels/cuda.
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda.h"

// Pinned staging for pageable host memory: two slabs per direction.
#define STAGE_BYTES ((size_t)32 << 20)
// Device memory left free beside the arena: the CUDA runtime and cuBLASLt
// allocate a little of their own as they run.
#define HEADROOM_BYTES ((size_t)256 << 20)

typedef struct copy_dir {
  pthread_mutex_t mu;
  int mu_ok;
  cudaStream_t stream;
  cudaEvent_t order;   // recorded on the compute stream when a copy starts
  void *slab[2];
  cudaEvent_t done[2]; // the last copy through each slab has finished
} copy_dir;

typedef struct cuda_dev {
  eng_dev dev; // first member: an eng_dev * is a cuda_dev *
  char name[16];
  int ordinal;
  cudaStream_t compute;
  copy_dir in, out;
  eng_cuda_ctx *ctx;
  pthread_mutex_t err_mu;
  eng_err err; // first error of a copy, code ENG_OK when none
} cuda_dev;

static cuda_dev *as_cuda(eng_dev *d) { return (cuda_dev *)d; }

static int fail(eng_err *e, cudaError_t st, const char *call, int line) {
  return eng_err_set(e, ENG_EDEVICE, "%s:%d: %s failed: %s (%s)", __FILE__, line, call, cudaGetErrorString(st),
                     cudaGetErrorName(st));
}

#define TRY(call)                                        \
  do {                                                   \
    cudaError_t st_ = (call);                            \
    if (st_ != cudaSuccess) return fail(e, st_, #call, __LINE__); \
  } while (0)

// ---- copies --------------------------------------------------------------------

static void keep_error(cuda_dev *c, const eng_err *e) {
  pthread_mutex_lock(&c->err_mu);
  if (c->err.code == ENG_OK) c->err = *e;
  pthread_mutex_unlock(&c->err_mu);
}

static int is_pinned(const void *p) {
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError(); // pageable memory may be reported as an error: not sticky, clear it
    return 0;
  }
  return a.type == cudaMemoryTypeHost;
}

// Host -> device through the slabs: slab k is refilled once its previous
// copy is done, so the memcpy into one slab overlaps the other's DMA.
static int staged_in(copy_dir *cd, char *dst, const char *src, size_t n, eng_err *e) {
  for (size_t off = 0, i = 0; off < n; i++) {
    size_t len = n - off < STAGE_BYTES ? n - off : STAGE_BYTES;
    int k = (int)(i & 1);
    TRY(cudaEventSynchronize(cd->done[k]));
    memcpy(cd->slab[k], src + off, len);
    TRY(cudaMemcpyAsync(dst + off, cd->slab[k], len, cudaMemcpyHostToDevice, cd->stream));
    TRY(cudaEventRecord(cd->done[k], cd->stream));
    off += len;
  }
  return 0;
}

// Device -> host through the slabs: chunk i lands in slab i&1 while chunk
// i-1 is copied out of the other.
static int staged_out(copy_dir *cd, char *dst, const char *src, size_t n, eng_err *e) {
  size_t prev_off = 0, prev_len = 0;
  size_t i = 0;
  for (size_t off = 0; off < n; i++) {
    size_t len = n - off < STAGE_BYTES ? n - off : STAGE_BYTES;
    int k = (int)(i & 1);
    TRY(cudaMemcpyAsync(cd->slab[k], src + off, len, cudaMemcpyDeviceToHost, cd->stream));
    TRY(cudaEventRecord(cd->done[k], cd->stream));
    if (i > 0) {
      TRY(cudaEventSynchronize(cd->done[k ^ 1]));
      memcpy(dst + prev_off, cd->slab[k ^ 1], prev_len);
    }
    prev_off = off, prev_len = len;
    off += len;
  }
  if (i > 0) {
    int k = (int)((i - 1) & 1);
    TRY(cudaEventSynchronize(cd->done[k]));
    memcpy(dst + prev_off, cd->slab[k], prev_len);
  }
  return 0;
}

static int copy_run(cuda_dev *c, copy_dir *cd, const eng_cuda_mark *after, void *dst, const void *src, size_t n,
                    int to_device, eng_err *e) {
  TRY(cudaSetDevice(c->ordinal));
  cudaEvent_t ev = after ? (cudaEvent_t)after->ev : cd->order;
  if (!after) TRY(cudaEventRecord(cd->order, c->compute));
  TRY(cudaStreamWaitEvent(cd->stream, ev, 0));
  const void *host = to_device ? src : dst;
  if (is_pinned(host)) {
    TRY(cudaMemcpyAsync(dst, src, n, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, cd->stream));
  } else {
    int rc = to_device ? staged_in(cd, dst, src, n, e) : staged_out(cd, dst, src, n, e);
    if (rc) return rc;
  }
  TRY(cudaStreamSynchronize(cd->stream));
  return 0;
}

static void copy(eng_dev *d, copy_dir *cd, const eng_cuda_mark *after, void *dst, const void *src, size_t n,
                 int to_device) {
  cuda_dev *c = as_cuda(d);
  if (!n) return;
  pthread_mutex_lock(&cd->mu);
  eng_err e = {0};
  if (copy_run(c, cd, after, dst, src, n, to_device, &e)) keep_error(c, &e);
  pthread_mutex_unlock(&cd->mu);
  atomic_fetch_add(to_device ? &d->bytes_in : &d->bytes_out, n);
}

static void cuda_copy_in(eng_dev *d, void *dst, const void *src, size_t n) {
  copy(d, &as_cuda(d)->in, NULL, dst, src, n, 1);
}

static void cuda_copy_out(eng_dev *d, void *dst, const void *src, size_t n) {
  copy(d, &as_cuda(d)->out, NULL, dst, src, n, 0);
}

void eng_dev_cuda_copy_in_after(eng_dev *d, const eng_cuda_mark *m, void *dst, const void *src, size_t n) {
  copy(d, &as_cuda(d)->in, m, dst, src, n, 1);
}

void eng_dev_cuda_copy_out_after(eng_dev *d, const eng_cuda_mark *m, void *dst, const void *src, size_t n) {
  copy(d, &as_cuda(d)->out, m, dst, src, n, 0);
}

// ---- arena ---------------------------------------------------------------------

static int cuda_reserve(eng_dev *d, size_t bytes, eng_err *e) {
  cuda_dev *c = as_cuda(d);
  TRY(cudaSetDevice(c->ordinal));
  TRY(cudaDeviceSynchronize()); // the old arena may still be in use
  TRY(cudaFree(d->base));
  d->base = NULL;
  void *p = NULL;
  cudaError_t st = cudaMalloc(&p, bytes ? bytes : 256);
  if (st != cudaSuccess) {
    cudaGetLastError(); // an allocation failure is not sticky
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    return eng_err_set(e, ENG_ECAP, "%s:%d: %s cannot allocate a %zu-byte arena: %s (%zu of %zu bytes free)",
                       __FILE__, __LINE__, c->name, bytes, cudaGetErrorString(st), free_b, total_b);
  }
  d->base = p;
  return 0;
}

// ---- open / close --------------------------------------------------------------

static void dir_close(copy_dir *cd) {
  if (cd->stream) cudaStreamSynchronize(cd->stream);
  for (int k = 0; k < 2; k++) {
    if (cd->done[k]) cudaEventDestroy(cd->done[k]);
    if (cd->slab[k]) cudaFreeHost(cd->slab[k]);
  }
  if (cd->order) cudaEventDestroy(cd->order);
  if (cd->stream) cudaStreamDestroy(cd->stream);
  if (cd->mu_ok) pthread_mutex_destroy(&cd->mu);
}

static void cuda_close(eng_dev *d) {
  cuda_dev *c = as_cuda(d);
  cudaSetDevice(c->ordinal);
  if (c->compute) cudaStreamSynchronize(c->compute);
  eng_cuda_ctx_close(c->ctx);
  dir_close(&c->in);
  dir_close(&c->out);
  if (c->compute) cudaStreamDestroy(c->compute);
  cudaFree(d->base);
  pthread_mutex_destroy(&c->err_mu);
  free(c);
}

static const eng_dev_ops cuda_ops = {cuda_reserve, cuda_copy_in, cuda_copy_out, cuda_close};

static int dir_open(copy_dir *cd, eng_err *e) {
  if (pthread_mutex_init(&cd->mu, NULL) != 0)
    return eng_err_set(e, ENG_ENOMEM, "cannot create the cuda backend's copy lock");
  cd->mu_ok = 1;
  TRY(cudaStreamCreateWithFlags(&cd->stream, cudaStreamNonBlocking));
  TRY(cudaEventCreateWithFlags(&cd->order, cudaEventDisableTiming));
  for (int k = 0; k < 2; k++) {
    TRY(cudaHostAlloc(&cd->slab[k], STAGE_BYTES, cudaHostAllocDefault));
    TRY(cudaEventCreateWithFlags(&cd->done[k], cudaEventDisableTiming));
  }
  return 0;
}

static int open_parts(cuda_dev *c, size_t cap, eng_err *e) {
  TRY(cudaSetDevice(c->ordinal));
  TRY(cudaStreamCreateWithFlags(&c->compute, cudaStreamNonBlocking));
  int rc = dir_open(&c->in, e);
  if (!rc) rc = dir_open(&c->out, e);
  if (!rc) rc = eng_cuda_ctx_open(&c->ctx, c->compute, e);
  if (rc) return rc;
  size_t free_b = 0, total_b = 0;
  TRY(cudaMemGetInfo(&free_b, &total_b));
  size_t avail = free_b > HEADROOM_BYTES ? free_b - HEADROOM_BYTES : 0;
  c->dev.cap = cap && cap < avail ? cap : avail;
  return 0;
}

int eng_dev_open_cuda(eng_dev **out, int ordinal, size_t cap, eng_err *e) {
  *out = NULL;
  int n = eng_cuda_device_count(e);
  if (n < 0) return n;
  if (n == 0) return eng_err_set(e, ENG_EDEVICE, "no CUDA device: the driver reports none");
  if (ordinal < 0 || ordinal >= n)
    return eng_err_set(e, ENG_EINVAL, "cuda:%d does not exist: this machine has %d CUDA device%s", ordinal, n,
                       n == 1 ? "" : "s");
  cuda_dev *c = calloc(1, sizeof *c);
  if (!c) return eng_err_set(e, ENG_ENOMEM, "cannot allocate the cuda device");
  pthread_mutex_init(&c->err_mu, NULL);
  c->ordinal = ordinal;
  snprintf(c->name, sizeof c->name, "cuda:%d", ordinal);
  c->dev.ops = &cuda_ops;
  c->dev.name = c->name;
  c->dev.host_compute = 0;
  int rc = open_parts(c, cap, e);
  if (rc) {
    eng_err_prefix(e, "opening %s: ", c->name);
    cuda_close(&c->dev);
    return rc;
  }
  *out = &c->dev;
  return 0;
}

// ---- the rest of cuda.h --------------------------------------------------------

int eng_dev_cuda_count(eng_err *e) { return eng_cuda_device_count(e); }

int eng_dev_cuda_describe(int ordinal, char *name, size_t name_cap, size_t *memory_bytes, eng_err *e) {
  struct cudaDeviceProp prop;
  cudaError_t st = cudaGetDeviceProperties(&prop, ordinal);
  if (st != cudaSuccess) {
    cudaGetLastError(); // not sticky: leave no error behind for this thread's next call
    return fail(e, st, "cudaGetDeviceProperties", __LINE__);
  }
  snprintf(name, name_cap, "%s", prop.name);
  *memory_bytes = prop.totalGlobalMem;
  return 0;
}

int eng_dev_cuda_use(eng_dev *d, eng_err *e) {
  TRY(cudaSetDevice(as_cuda(d)->ordinal));
  return 0;
}

eng_cuda_ctx *eng_dev_cuda_ctx(eng_dev *d) { return as_cuda(d)->ctx; }

eng_cuda_stream eng_dev_cuda_stream(eng_dev *d, eng_cuda_stream_kind k) {
  cuda_dev *c = as_cuda(d);
  return k == ENG_CUDA_STREAM_COPY_IN ? c->in.stream : k == ENG_CUDA_STREAM_COPY_OUT ? c->out.stream : c->compute;
}

int eng_dev_cuda_sync(eng_dev *d, eng_err *e) {
  cuda_dev *c = as_cuda(d);
  TRY(cudaSetDevice(c->ordinal));
  TRY(cudaStreamSynchronize(c->compute));
  TRY(cudaStreamSynchronize(c->in.stream));
  TRY(cudaStreamSynchronize(c->out.stream));
  TRY(cudaGetLastError());
  pthread_mutex_lock(&c->err_mu);
  eng_err kept = c->err;
  c->err.code = ENG_OK;
  pthread_mutex_unlock(&c->err_mu);
  if (kept.code == ENG_OK) return 0;
  if (e) *e = kept;
  return kept.code;
}

int eng_dev_cuda_pin(eng_dev *d, void *p, size_t n, eng_err *e) {
  (void)d;
  TRY(cudaHostRegister(p, n, cudaHostRegisterDefault));
  return 0;
}

void eng_dev_cuda_unpin(eng_dev *d, void *p) {
  (void)d;
  cudaHostUnregister(p);
}

int eng_dev_cuda_host_alloc(eng_dev *d, void **p, size_t n, eng_err *e) {
  (void)d;
  *p = NULL;
  TRY(cudaHostAlloc(p, n ? n : 1, cudaHostAllocDefault));
  return 0;
}

void eng_dev_cuda_host_free(void *p) { cudaFreeHost(p); }

int eng_dev_cuda_mark_init(eng_dev *d, eng_cuda_mark *m, eng_err *e) {
  cudaEvent_t ev = NULL;
  m->ev = NULL;
  TRY(cudaSetDevice(as_cuda(d)->ordinal));
  TRY(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  m->ev = ev;
  return 0;
}

int eng_dev_cuda_mark(eng_dev *d, eng_cuda_mark *m, eng_err *e) {
  TRY(cudaEventRecord((cudaEvent_t)m->ev, as_cuda(d)->compute));
  return 0;
}

void eng_dev_cuda_mark_free(eng_cuda_mark *m) {
  if (m->ev) cudaEventDestroy((cudaEvent_t)m->ev);
  m->ev = NULL;
}
