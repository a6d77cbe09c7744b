// The cpu backend: the "device" is a host arena with a hard byte cap and its
// copies are real memcpy, so streaming, placement and recompute run on every
// CI machine exactly as they will on a GPU. With a link bandwidth set
// (eng_dev_cpu_links), each direction is a link of that bandwidth
// (common/link.h), as PCIe would be.
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "common/clock.h"
#include "common/link.h"

typedef struct cpu_dev {
  eng_dev d;          // first: the device is the cpu_dev
  eng_link in, out;   // host -> arena, arena -> host
} cpu_dev;

static void cpu_copy_in(eng_dev *d, void *dst, const void *src, size_t n) {
  double t0 = eng_now();
  memcpy(dst, src, n);
  atomic_fetch_add(&d->bytes_in, n);
  eng_link_pass(&((cpu_dev *)d)->in, n, t0);
}

static void cpu_copy_out(eng_dev *d, void *dst, const void *src, size_t n) {
  double t0 = eng_now();
  memcpy(dst, src, n);
  atomic_fetch_add(&d->bytes_out, n);
  eng_link_pass(&((cpu_dev *)d)->out, n, t0);
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
  cpu_dev *c = (cpu_dev *)d;
  free(d->base);
  eng_link_destroy(&c->in);
  eng_link_destroy(&c->out);
  free(c);
}

static const eng_dev_ops cpu_ops = {cpu_reserve, cpu_copy_in, cpu_copy_out, cpu_close};

int eng_dev_open_cpu(eng_dev **out, size_t cap, eng_err *e) {
  cpu_dev *c = calloc(1, sizeof *c);
  if (!c) return eng_err_set(e, ENG_ENOMEM, "cannot allocate the cpu device");
  eng_link_init(&c->in, 0);
  eng_link_init(&c->out, 0);
  eng_dev *d = &c->d;
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

void eng_dev_cpu_links(eng_dev *d, double h2d_bps, double d2h_bps) {
  cpu_dev *c = (cpu_dev *)d;
  c->in.bps = h2d_bps > 0 ? h2d_bps : 0;
  c->out.bps = d2h_bps > 0 ? d2h_bps : 0;
}

void eng_dev_cpu_moved_in(eng_dev *d, size_t n, double t0) {
  atomic_fetch_add(&d->bytes_in, n);
  eng_link_pass(&((cpu_dev *)d)->in, n, t0);
}

void eng_dev_cpu_moved_out(eng_dev *d, size_t n, double t0) {
  atomic_fetch_add(&d->bytes_out, n);
  eng_link_pass(&((cpu_dev *)d)->out, n, t0);
}
