#include "common/link.h"

#include <errno.h>
#include <time.h>

#include "common/clock.h"

void eng_link_init(eng_link *l, double bps) {
  l->bps = bps > 0 ? bps : 0;
  l->free_at = 0;
  pthread_mutex_init(&l->mu, NULL);
}

void eng_link_destroy(eng_link *l) { pthread_mutex_destroy(&l->mu); }

void eng_link_pass(eng_link *l, size_t n, double t0) {
  if (l->bps <= 0) return;
  pthread_mutex_lock(&l->mu);
  double start = t0 > l->free_at ? t0 : l->free_at, end = start + (double)n / l->bps;
  l->free_at = end;
  pthread_mutex_unlock(&l->mu);
  for (double now = eng_now(); now < end; now = eng_now()) {
    double d = end - now;
    struct timespec ts = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
    if (nanosleep(&ts, NULL) && errno != EINTR) break;
  }
}
