#include "common/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int eng_err_set(eng_err *e, int code, const char *fmt, ...) {
  if (!e) return code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  va_end(ap);
  e->code = code;
  return code;
}

int eng_err_prefix(eng_err *e, const char *fmt, ...) {
  if (!e) return ENG_OK;
  char tail[sizeof e->msg];
  memcpy(tail, e->msg, sizeof tail);
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  va_end(ap);
  if (n >= 0 && (size_t)n < sizeof e->msg)
    memcpy(e->msg + n, tail, sizeof e->msg - (size_t)n - 1);
  e->msg[sizeof e->msg - 1] = '\0';
  return e->code;
}

const char *eng_err_name(int code) {
  switch (code) {
  case ENG_OK: return "ok";
  case ENG_EINVAL: return "invalid input";
  case ENG_EIO: return "I/O error";
  case ENG_ENOMEM: return "out of host memory";
  case ENG_ENOTSUP: return "not supported";
  case ENG_ECAP: return "device cap too small";
  case ENG_ECANCEL: return "cancelled";
  case ENG_ENONFINITE: return "non-finite values";
  case ENG_ESTATE: return "bad state";
  case ENG_EDEVICE: return "device error";
  default: return "unknown error";
  }
}
