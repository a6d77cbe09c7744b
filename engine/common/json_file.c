#include "common/json_file.h"

#include <unistd.h>

const char *eng_json_fault(const json_error_t *err) {
  switch (json_error_code(err)) {
  case json_error_out_of_memory: return "out of memory";
  case json_error_stack_overflow: return "nested too deeply";
  case json_error_invalid_utf8: return "invalid UTF-8";
  case json_error_premature_end_of_input: return "ends too early";
  case json_error_end_of_input_expected: return "more after the value";
  case json_error_null_character: return "a NUL character";
  case json_error_null_byte_in_key: return "a NUL byte in a key";
  case json_error_duplicate_key: return "a duplicate key";
  case json_error_numeric_overflow: return "a number out of range";
  default: return "invalid syntax";
  }
}

int eng_json_load(const eng_fs *fs, const char *path, json_t **root, eng_err *e) {
  int fd;
  *root = NULL;
  int rc = eng_fs_open(fs, path, &fd, e);
  if (rc) return rc;
  json_error_t jerr;
  *root = json_loadfd(fd, JSON_REJECT_DUPLICATES, &jerr);
  close(fd);
  if (*root) return ENG_OK;
  return eng_err_set(e, ENG_EINVAL, "%s: not valid JSON at line %d, column %d (byte %d): %s", path, jerr.line,
                     jerr.column, jerr.position, eng_json_fault(&jerr));
}
