#include "plan/strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void eng_sb_put(eng_sb *b, const char *fmt, ...) {
  if (b->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
    va_end(ap);
    if (m < 0) {
      b->oom = 1;
      return;
    }
    if (b->s && b->n + (size_t)m < b->cap) {
      b->n += (size_t)m;
      return;
    }
    size_t cap = b->cap ? 2 * b->cap : 65536;
    while (cap < b->n + (size_t)m + 1) cap *= 2;
    char *s = realloc(b->s, cap);
    if (!s) {
      b->oom = 1;
      return;
    }
    b->s = s;
    b->cap = cap;
  }
}
