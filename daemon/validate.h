// Validation of every field of every request, before anything is written
// (DESIGN §5). Pure: no daemon state, only the request and the data roots,
// so the fuzz target (tests/fuzz) runs it as the daemon does. A refusal
// fills val_err with a gRPC status code and a message that starts with the
// field's path: "spec.training.batch_size: must be in [1, 65536] (got -3)".
#ifndef TRAIND_VALIDATE_H
#define TRAIND_VALIDATE_H

#include <grpc/status.h>
#include <protobuf-c/protobuf-c.h>

#include "common/fs_open.h"
#include "traind/v1/traind.pb-c.h"

typedef struct val_err {
  grpc_status_code code;
  char msg[768];
} val_err;

typedef struct val_roots {
  char *const *dirs; // resolved (realpath) data roots
  int n;
  // Whose access the job's files are opened with (daemon/owner.h, applied by
  // spec_fs); NULL: the daemon's own.
  const struct owner_access *who;
} val_roots;

// Every request: strings are UTF-8 without NUL, no field is unknown to this
// build (a newer client's field would otherwise be silently dropped).
int val_message(const ProtobufCMessage *m, const char *path, val_err *e);

// A request's bytes as they came, before decoding: a string field holding a
// NUL byte is refused, naming the field (decoded, the C string would end
// there: "rid\0x" would pass for "rid"). Bytes that are not a valid message
// are left to the decoder.
int val_wire(const ProtobufCMessageDescriptor *d, const void *buf, size_t n, val_err *e);

// A job id or request id: 1..64 of [A-Za-z0-9._-].
int val_id(const char *s, const char *field, val_err *e);

// The spec, its paths checked against the roots (they are resolved again
// when the job starts: the files or the roots may change meanwhile).
int val_spec(const Traind__V1__JobSpec *spec, const char *path, const val_roots *roots, val_err *e);
// A SubmitJobRequest in two parts: what an idempotent retry must pass
// (message shape, request_id), then the rest (priority, spec).
int val_submit_head(const Traind__V1__SubmitJobRequest *r, val_err *e);
int val_submit(const Traind__V1__SubmitJobRequest *r, const val_roots *roots, val_err *e);
int val_list(const Traind__V1__ListJobsRequest *r, val_err *e);
// PlanJob's sizing fields (flops, gpu_hours, fit); the spec is val_spec's.
int val_plan_sizing(const Traind__V1__PlanJobRequest *r, val_err *e);
int val_watch(const Traind__V1__WatchJobRequest *r, val_err *e);
int val_export(const Traind__V1__ExportJobRequest *r, val_err *e);
// ScoreData's shape (val_message) and numbers; its paths are val_path's.
int val_score(const Traind__V1__ScoreDataRequest *r, val_err *e);

// path resolved (symlinks followed, as realpath does) must lie under a root and
// be a readable regular file (dir = 0) or directory (dir = 1). *resolved is
// malloc'd. A path absent, outside the roots or unreadable gets one answer,
// "<field>: " ENG_FS_NOT_THERE ": <path>", whichever it is, the words the
// engine uses when it opens a job's files (common/fs_open.h).
int val_path(const char *path, const char *field, int dir, const val_roots *roots, char **resolved, val_err *e);

#endif
