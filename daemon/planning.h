// Planning jobs with the planner (engine/plan, DESIGN §3): the device profile
// of this machine, made once per job shape and kept, and the plan a job runs
// with. Called from runner threads and PlanJob's work threads, never from the
// loop (a calibration takes seconds, a solve up to its time limit).
#ifndef TRAIND_PLANNING_H
#define TRAIND_PLANNING_H

#include "engine.h"
#include "plan/plan.h"
#include "storage/store.h"

typedef struct planning planning;

// profile_file: a profile (engine/plan/profiles/*.json format) to plan with
// instead of calibrating this machine; NULL: calibrate, once per job shape,
// keeping the result in <state_dir>/profiles. override_file: fields that
// replace the profile's (any subset), or NULL. st: the daemon's store, whose
// spill path the calibration times.
int planning_open(planning **out, const char *profile_file, const char *override_file, store *st,
                  const char *state_dir, eng_err *e);
void planning_close(planning *p);
// The device's FLOP/s that MFU is quoted against, from profile_file (with
// its override): a GPU's; 0 when no profile file is configured.
double planning_peak(const planning *p);

// The plan for the engine spec s (model config, batch, seq_len, device cap):
// the profile (calibrated at s's shapes the first time they are seen), then
// the planner. ENG_ECAP names the budget that fails. *max_batch, when not
// NULL, receives the largest global batch that fits. The plan names its
// profile.
// *svg, when not NULL, receives a timeline of one simulated step (malloc'ed).
int planning_make(planning *p, const eng_spec *s, eng_plan *out, int *max_batch, char **svg, eng_err *e);

#endif
