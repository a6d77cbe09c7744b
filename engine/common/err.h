// Errors of the engine: every fallible function returns 0 or a negative
// ENG_E* code and fills a caller-owned eng_err with one sentence that names
// the input at fault (file, field, tensor). The library never prints.
#ifndef ENG_COMMON_ERR_H
#define ENG_COMMON_ERR_H

#include <stddef.h>

enum {
  ENG_OK = 0,
  ENG_EINVAL = -1,   // bad input: a file, a field, a spec value
  ENG_EIO = -2,      // reading or writing a file or a store failed
  ENG_ENOMEM = -3,   // host allocation failed
  ENG_ENOTSUP = -4,  // a model feature the engine does not implement
  ENG_ECAP = -5,     // the device byte cap cannot hold what the step needs
  ENG_ECANCEL = -6,  // the cancel flag was raised
  ENG_ENONFINITE = -7, // non-finite loss or gradients
  ENG_ESTATE = -8,   // call out of order (e.g. load into a run of another shape)
  ENG_EDEVICE = -9,  // the GPU, its driver or a GPU library failed (or there is no GPU)
};

typedef struct eng_err {
  int code;        // last code set, ENG_OK when none
  char msg[512];   // one sentence, NUL-terminated
} eng_err;

// Sets e (when not NULL) and returns code, so callers write
// `return eng_err_set(e, ENG_EINVAL, "%s: field \"%s\" ...", path, key);`
int eng_err_set(eng_err *e, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

// Prefixes the message already in e with more context ("loading X: ").
int eng_err_prefix(eng_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// Short name of a code ("invalid input", "I/O error", ...).
const char *eng_err_name(int code);

#endif
