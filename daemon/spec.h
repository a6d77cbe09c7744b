// From a validated JobSpec to what the engine runs: the model's
// configuration (read from the Hugging Face directory, or the spec's own
// with defaults filled in), the step budget, the checkpoint policy and the
// eng_spec. Uses the engine, so unlike validate.c it is not fuzzed alone.
#ifndef TRAIND_SPEC_H
#define TRAIND_SPEC_H

#include "engine.h"
#include "traind/v1/traind.pb-c.h"
#include "validate.h"

typedef struct spec_defaults {
  int ckpt_every, ckpt_keep;
  int64_t cpu_memory_bytes;
  const char *state_dir; // tokenized data is kept under <state_dir>/tokens/<owner uid>; NULL: not kept
} spec_defaults;

// The engine's view of a job. eng's strings point into the JobSpec or into
// the resolved paths below; spec_plan_free releases the latter.
typedef struct spec_plan {
  eng_spec eng;
  int64_t total_steps;
  int ckpt_every, ckpt_keep;
  char *model_dir, *train_path, *eval_path; // resolved, or NULL
  char *ref_dir, *band_file; // data selection's (spec.select), resolved, or NULL
  char *data_cache;       // the owner's tokenized-data directory (eng.data_cache), or NULL
  eng_fs *fs;             // the roots the engine opens them under (eng.fs), or NULL
  int use_planner;        // spec.device.plan: the planner chooses the policy
  char *plan_json;        // the plan already made for the job (a resume), or NULL
  eng_plan *plan;         // the plan the job runs, once applied (eng.plan points here), or NULL
} spec_plan;

// The file policy over the roots (engine/common/fs_open.h) that every file
// of a job is opened under; *out is freed with eng_fs_free.
int spec_fs(const val_roots *roots, eng_fs **out, val_err *e);

// The model's configuration. hf_dir is resolved against the roots and read
// as the engine reads it (eng_hf_load_config, under spec_fs); errors name
// the field (INVALID_ARGUMENT).
int spec_model_config(const Traind__V1__JobSpec *s, const val_roots *roots, eng_config *c, val_err *e);

// Builds the plan for config c; with roots != NULL the paths are resolved
// (and checked) again and the eng_spec carries them and the roots' file
// policy, else it carries no paths (enough for sizing). Checks what needs the engine: the device arena the job needs
// against its cap, seq_len against max_position_embeddings.
int spec_plan_build(const Traind__V1__JobSpec *s, const eng_config *c, const spec_defaults *d, const val_roots *roots,
                    spec_plan *p, val_err *e);
void spec_plan_free(spec_plan *p);

// eng_config <-> the proto's ModelConfig (whose strings/submessages: none).
void spec_config_to_pb(const eng_config *c, Traind__V1__ModelConfig *out);
void spec_config_from_pb(const Traind__V1__ModelConfig *m, eng_config *c);

#endif
