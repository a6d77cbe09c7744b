// The cpu backend: the "device" is a host arena with a hard byte cap and its
// copies are real memcpy, so streaming, placement and recompute run on every
// CI machine exactly as they will on a GPU.
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"

static void cpu_copy_in(eng_dev *d, void *dst, const void *src, size_t n) {
  memcpy(dst, src, n);
  atomic_fetch_add(&d->bytes_in, n);
}

static void cpu_copy_out(eng_dev *d, void *dst, const void *src, size_t n) {
  memcpy(dst, src, n);
  atomic_fetch_add(&d->bytes_out, n);
}

static int cpu_reserve(eng_dev *d, size_t bytes, eng_err *e) {
  void *p = NULL;
  if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0)
    return eng_err_set(e, ENG_ENOMEM, "cannot allocate a %zu-byte cpu arena", bytes);
  free(d->base);
  d->base = p;
  return 0;
}

static void cpu_close(eng_dev *d) {
  free(d->base);
  free(d);
}

static const eng_dev_ops cpu_ops = {cpu_reserve, cpu_copy_in, cpu_copy_out, cpu_close};

int eng_dev_open_cpu(eng_dev **out, size_t cap, eng_err *e) {
  eng_dev *d = calloc(1, sizeof *d);
  if (!d) return eng_err_set(e, ENG_ENOMEM, "cannot allocate the cpu device");
  d->ops = &cpu_ops;
  d->name = "cpu";
  d->host_compute = 1;
  d->cap = cap;
  *out = d;
  return 0;
}

int eng_dev_reserve(eng_dev *d, size_t bytes, const char *what, eng_err *e) {
  if (bytes > d->cap)
    return eng_err_set(e, ENG_ECAP,
                       "device cap of %zu bytes is too small: %s needs %zu bytes (%.1f MiB)",
                       d->cap, what, bytes, bytes / 1048576.0);
  int rc = d->ops->reserve(d, bytes, e);
  if (rc) return rc;
  d->used = 0;
  d->peak = 0;
  d->reserved = bytes;
  return 0;
}

void *eng_dev_alloc(eng_dev *d, size_t n) {
  size_t sz = (n + 63) & ~(size_t)63;
  if (d->used + sz > d->reserved) return NULL;
  void *p = d->base + d->used;
  d->used += sz;
  if (d->used > d->peak) d->peak = d->used;
  return p;
}

void eng_dev_close(eng_dev *d) {
  if (d) d->ops->close(d);
}
