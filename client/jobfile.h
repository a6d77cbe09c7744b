// A job file: YAML whose keys follow JobSpec in traind.proto (name, model,
// data, training, checkpoints, device, seed), plus request_id, priority and
// preempt of the SubmitJobRequest at the top level. Relative paths
// (model.hf_dir, data.train_path, data.eval_path) are taken relative to the
// file's directory, since the daemon only accepts absolute ones.
#ifndef TRAIND_CLIENT_JOBFILE_H
#define TRAIND_CLIENT_JOBFILE_H

#include <stddef.h>

#include "traind/v1/traind.pb-c.h"

// Fills req (built with pbset_new) from the file. Errors name the file,
// the line and the key.
int jobfile_load(Traind__V1__SubmitJobRequest *req, const char *path, char *err, size_t errlen);

// The request-level keys, or "spec." + key for a JobSpec field.
void jobfile_key_path(const char *key, char *out, size_t n);

// Makes the spec's relative paths absolute against base (a directory).
int jobfile_abs_paths(Traind__V1__SubmitJobRequest *req, const char *base, char *err, size_t errlen);

#endif
