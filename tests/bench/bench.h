// What the benchmarks share: the monotonic clock (the engine's eng_now) and
// the sorting behind the medians and percentiles they quote.
#ifndef TESTS_BENCH_BENCH_H
#define TESTS_BENCH_BENCH_H

#include <stdlib.h>

#include "common/clock.h"

static int bench_cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

// Sorts x ascending.
static inline void bench_sort(double *x, int n) { qsort(x, (size_t)n, sizeof *x, bench_cmp); }

// Median of x[0..n) (sorts x); the mean of the middle two when n is even.
static inline double bench_median(double *x, int n) {
  bench_sort(x, n);
  return n % 2 ? x[n / 2] : (x[n / 2 - 1] + x[n / 2]) / 2;
}

#endif
