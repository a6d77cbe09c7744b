// A growing text buffer for the plan's table and SVG (internal).
#ifndef ENG_PLAN_STRBUF_H
#define ENG_PLAN_STRBUF_H

#include <stddef.h>

typedef struct eng_sb {
  char *s;
  size_t n, cap;
  int oom; // an allocation failed: later writes are dropped
} eng_sb;

void eng_sb_put(eng_sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
