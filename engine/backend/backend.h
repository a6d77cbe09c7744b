// The device interface (DESIGN §1, §2). A device has an arena with a hard
// byte cap, from which the executor carves layer slots, activations and
// workspace once per run, and copies that move bytes between host and arena.
// The cpu backend's arena is host memory and its copies are memcpy; the cuda
// backend (backend/cuda.h) keeps the same contract with cudaMalloc and async copies.
// Copies are called from the executor's stream threads and must be safe to
// run concurrently with compute on other arena regions.
#ifndef ENG_BACKEND_BACKEND_H
#define ENG_BACKEND_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

typedef struct eng_dev eng_dev;

typedef struct eng_dev_ops {
  // Replaces the arena by one of `bytes` (called by eng_dev_reserve after
  // its cap check): sets d->base or fails with ENG_ECAP/ENG_ENOMEM.
  int (*reserve)(eng_dev *d, size_t bytes, eng_err *e);
  void (*copy_in)(eng_dev *d, void *dst, const void *src, size_t n);   // host -> arena
  void (*copy_out)(eng_dev *d, void *dst, const void *src, size_t n);  // arena -> host
  void (*close)(eng_dev *d);
} eng_dev_ops;

struct eng_dev {
  const eng_dev_ops *ops;
  const char *name;       // "cpu", "cuda:0"
  int host_compute;       // 1 when the device's compute runs on the host cores (cpu):
                          // the executor then runs optimizer updates on its own
                          // thread instead of a competing one
  size_t cap;             // hard cap of the arena, bytes
  size_t reserved;        // bytes of arena actually allocated (<= cap)
  size_t used;            // bytes handed out
  size_t peak;            // most bytes ever handed out
  char *base;             // arena memory
  _Atomic uint64_t bytes_in;   // bytes copied host -> arena since open
  _Atomic uint64_t bytes_out;  // bytes copied arena -> host since open
};

// Opens the cpu backend. The arena is reserved lazily: nothing is allocated
// until eng_dev_reserve says how much the run needs (so a cap that is too
// small is refused before allocation).
int eng_dev_open_cpu(eng_dev **out, size_t cap, eng_err *e);
// Gives a cpu device's copy-in and copy-out the bandwidth of a link (bytes
// per second; 0: none), so that copies take the time PCIe would
// (common/link.h). Before the device's first copy.
void eng_dev_cpu_links(eng_dev *d, double h2d_bps, double d2h_bps);
// n bytes entered (in) or left (out) a cpu device's arena by a copy of the
// caller's own (one that converts as it copies), started at t0: counted, and
// timed on the link.
void eng_dev_cpu_moved_in(eng_dev *d, size_t n, double t0);
void eng_dev_cpu_moved_out(eng_dev *d, size_t n, double t0);

// Allocates the arena for `bytes` (<= cap), or refuses with ENG_ECAP naming
// both numbers and `what` needs them.
int eng_dev_reserve(eng_dev *d, size_t bytes, const char *what, eng_err *e);

// Carves n bytes (64-byte aligned) from the reserved arena; NULL when the
// reservation is exhausted (a planning bug: the executor sizes it exactly).
void *eng_dev_alloc(eng_dev *d, size_t n);

void eng_dev_close(eng_dev *d);

#endif
