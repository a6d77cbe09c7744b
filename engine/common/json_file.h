// JSON from the files a job names: read through the file policy
// (common/fs_open.h), and failures told by place (line, column, byte
// offset) and kind, never by content. jansson's own message quotes the
// input ("invalid token near 'hunter2'"), which would hand a file's bytes
// to whoever reads the error.
#ifndef ENG_COMMON_JSON_FILE_H
#define ENG_COMMON_JSON_FILE_H

#include <jansson.h>

#include "common/err.h"
#include "common/fs_open.h"

// What went wrong, in words that quote nothing ("invalid syntax", ...).
const char *eng_json_fault(const json_error_t *err);

// Parses the file path (duplicate keys refused). ENG_EIO when it cannot be
// opened (fs_open.h's messages), ENG_EINVAL "path: not valid JSON at line L,
// column C (byte B): <fault>".
int eng_json_load(const eng_fs *fs, const char *path, json_t **root, eng_err *e);

#endif
