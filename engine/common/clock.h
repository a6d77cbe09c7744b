// Seconds on the monotonic clock, for phase times, deadlines and rates.
#ifndef ENG_COMMON_CLOCK_H
#define ENG_COMMON_CLOCK_H

#include <time.h>

static inline double eng_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
