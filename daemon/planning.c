#include "planning.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <uv.h>

#include "log.h"
#include "plan/cost.h"
#include "plan/planner.h"
#include "plan/profile.h"
#include "plan/sim.h"

enum { NVME_PROBE_BYTES = 64 << 20 };

struct planning {
  uv_mutex_t mu; // one calibration at a time
  char *profile_file, *override_file;
  char *state_dir; // the spill store's filesystem, for its free space
  store *st;
  double nvme_read, nvme_write; // measured once, bytes/s
  double peak;     // the profile file's dense GEMM rate (0: none configured)
};

int planning_open(planning **out, const char *profile_file, const char *override_file, store *st,
                  const char *state_dir, eng_err *e) {
  planning *p = calloc(1, sizeof *p);
  if (!p) return eng_err_set(e, ENG_ENOMEM, "cannot allocate the planner state");
  p->st = st;
  uv_mutex_init(&p->mu);
  int rc = 0;
  if (!(p->state_dir = strdup(state_dir)) || (profile_file && !(p->profile_file = strdup(profile_file))) ||
      (override_file && !(p->override_file = strdup(override_file))))
    rc = eng_err_set(e, ENG_ENOMEM, "cannot allocate the planner state");
  // Refuse a bad file at startup rather than at the first plan.
  eng_profile check;
  if (!rc && profile_file) {
    rc = eng_profile_load(profile_file, &check, e);
    if (!rc) rc = eng_profile_validate(&check, profile_file, e);
    if (!rc && p->override_file) rc = eng_profile_merge_file(&check, p->override_file, e);
    if (!rc) p->peak = check.gemm_flops;
  }
  if (!rc && override_file) {
    memset(&check, 0, sizeof check);
    rc = eng_profile_merge_file(&check, override_file, e);
  }
  if (rc) {
    planning_close(p);
    return rc;
  }
  *out = p;
  return 0;
}

double planning_peak(const planning *p) { return p->peak; }

void planning_close(planning *p) {
  if (!p) return;
  uv_mutex_destroy(&p->mu);
  free(p->profile_file);
  free(p->override_file);
  free(p->state_dir);
  free(p);
}

// The spill tier as the executor uses it, measured once.
static int nvme_probe(planning *p, eng_err *e) {
  if (p->nvme_read > 0) return 0;
  int rc = store_act_probe(p->st, NVME_PROBE_BYTES, &p->nvme_read, &p->nvme_write, e);
  return rc ? eng_err_prefix(e, "calibration of the spill store: ") : 0;
}

// This machine's profile at the spec's shapes (under p->mu): calibrated
// the first time a shape is seen and stored in <state_dir>/profiles, so a
// restart measures nothing again; then the override file's fields.
static int profile_for(planning *p, const eng_spec *s, eng_profile *out, eng_err *e) {
  int rc;
  if (p->profile_file) {
    rc = eng_profile_load(p->profile_file, out, e);
  } else {
    const eng_config *c = &s->config;
    char path[4400];
    eng_spec_profile_method(s, out); // calibrating measures the method's rotations
    snprintf(path, sizeof path, "%s/profiles/cpu-%s-v%d-d%d-l%d-h%d-kv%d-hd%d-ff%d-b%d-t%d-cap%zu-poet%d.json",
             p->state_dir, eng_arch_name(c->arch), c->vocab, c->d_model, c->n_layers, c->n_heads, c->n_kv_heads,
             c->head_dim, c->d_ff, s->batch, s->seq_len, s->device_cap, out->poet_block);
    if (access(path, R_OK) == 0) {
      rc = eng_profile_load(path, out, e);
    } else {
      rc = nvme_probe(p, e);
      if (!rc)
        rc = eng_profile_calibrate_cpu(c, s->batch, s->seq_len, (double)s->device_cap, ENG_CALIBRATE_SECONDS, out, e);
      if (rc) return rc;
      struct statvfs fs;
      double free_bytes = statvfs(p->state_dir, &fs) == 0 ? (double)fs.f_bavail * (double)fs.f_frsize : 0;
      eng_profile_set_nvme(out, p->nvme_read, p->nvme_write, free_bytes);
      char dir[4300];
      snprintf(dir, sizeof dir, "%s/profiles", p->state_dir);
      if (mkdir(dir, 0750) && errno != EEXIST)
        return eng_err_set(e, ENG_EIO, "calibration: cannot create %s: %s", dir, strerror(errno));
      rc = eng_profile_save(out, path, "calibrated by traind for one job shape", e);
      // Seconds of measuring: the log tells a new profile from a stored one.
      if (!rc) log_info("planning: calibrated this machine for a new job shape (%s)", path);
    }
  }
  if (!rc && p->override_file) rc = eng_profile_merge_file(out, p->override_file, e);
  return rc;
}

// The simulated step of plan pl as an SVG timeline.
static int timeline(const eng_spec *s, const eng_profile *prof, const eng_plan *pl, char **svg, eng_err *e) {
  eng_plan_cost k;
  eng_plan_sim sim;
  int rc = eng_plan_cost_make(&s->config, pl->batch, pl->seq_len, pl->micro_batch, prof, &k, e);
  if (!rc) rc = eng_plan_simulate(pl, &k, &sim, e);
  if (rc) return rc;
  rc = eng_plan_svg(pl, &sim, svg, e);
  eng_plan_sim_free(&sim);
  return rc;
}

int planning_make(planning *p, const eng_spec *s, eng_plan *out, int *max_batch, char **svg, eng_err *e) {
  eng_profile prof;
  uv_mutex_lock(&p->mu);
  int rc = profile_for(p, s, &prof, e);
  uv_mutex_unlock(&p->mu);
  if (rc) return rc;
  eng_spec_profile_method(s, &prof);
  eng_plan_opts o;
  eng_plan_opts_defaults(&o);
  if (max_batch) {
    // Up to 64 times the asked batch: enough to say how far it could grow.
    rc = eng_plan_max_batch(&s->config, s->seq_len, &prof, &o, s->batch * 64, max_batch, e);
    if (rc && rc != ENG_ECAP) return rc;
    if (rc) *max_batch = 0;
  }
  rc = eng_plan_make(&s->config, "job", s->batch, s->seq_len, &prof, &o, out, e);
  eng_plan_thread_release(); // the runner thread that planned ends at shutdown
  if (rc || !svg) return rc;
  if ((rc = timeline(s, &prof, out, svg, e))) eng_plan_free(out);
  return rc;
}
