#include "planning.h"

#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <uv.h>

#include "plan/cost.h"
#include "plan/planner.h"
#include "plan/profile.h"
#include "plan/sim.h"

// A calibration is made at one job shape; jobs of the same shape reuse it.
enum { CACHE_MAX = 16, NVME_PROBE_BYTES = 64 << 20 };
static const double CALIBRATE_SECONDS = 10;

typedef struct shape {
  eng_config c;
  int batch, seq_len;
  size_t cap;
} shape;

struct planning {
  uv_mutex_t mu; // one calibration at a time; guards the cache
  char *profile_file;
  char *state_dir; // the spill store's filesystem, for its free space
  store *st;
  double nvme_read, nvme_write; // measured once, bytes/s
  int n;
  shape keys[CACHE_MAX];
  eng_profile profiles[CACHE_MAX];
};

int planning_open(planning **out, const char *profile_file, store *st, const char *state_dir, eng_err *e) {
  planning *p = calloc(1, sizeof *p);
  if (!p || !(p->state_dir = strdup(state_dir))) {
    free(p);
    return eng_err_set(e, ENG_ENOMEM, "cannot allocate the planner state");
  }
  if (profile_file) {
    eng_profile check;
    int rc = eng_profile_load(profile_file, &check, e);
    if (!rc) rc = eng_profile_validate(&check, profile_file, e);
    if (rc || !(p->profile_file = strdup(profile_file))) {
      free(p->state_dir);
      free(p);
      return rc ? rc : eng_err_set(e, ENG_ENOMEM, "cannot allocate the planner state");
    }
  }
  p->st = st;
  uv_mutex_init(&p->mu);
  *out = p;
  return 0;
}

void planning_close(planning *p) {
  if (!p) return;
  uv_mutex_destroy(&p->mu);
  free(p->profile_file);
  free(p->state_dir);
  free(p);
}

// The spill tier as the executor uses it, measured once.
static int nvme_probe(planning *p, eng_err *e) {
  if (p->nvme_read > 0) return 0;
  int rc = store_act_probe(p->st, NVME_PROBE_BYTES, &p->nvme_read, &p->nvme_write, e);
  return rc ? eng_err_prefix(e, "calibration of the spill store: ") : 0;
}

// This machine's profile at the spec's shapes (under p->mu).
static int profile_for(planning *p, const eng_spec *s, eng_profile *out, eng_err *e) {
  if (p->profile_file) return eng_profile_load(p->profile_file, out, e);
  shape k;
  memset(&k, 0, sizeof k); // compared with memcmp: padding must be zero
  k.c = s->config;
  k.batch = s->batch;
  k.seq_len = s->seq_len;
  k.cap = s->device_cap;
  for (int i = 0; i < p->n; i++)
    if (!memcmp(&p->keys[i], &k, sizeof k)) {
      *out = p->profiles[i];
      return 0;
    }
  int rc = nvme_probe(p, e);
  if (!rc) rc = eng_profile_calibrate_cpu(&s->config, s->batch, s->seq_len, (double)s->device_cap,
                                          CALIBRATE_SECONDS, out, e);
  if (rc) return rc;
  struct statvfs fs;
  double free_bytes = 0;
  if (statvfs(p->state_dir, &fs) == 0)
    free_bytes = (double)fs.f_bavail * (double)fs.f_frsize;
  eng_profile_set_nvme(out, p->nvme_read, p->nvme_write, free_bytes);
  int slot = p->n < CACHE_MAX ? p->n++ : CACHE_MAX - 1;
  p->keys[slot] = k;
  p->profiles[slot] = *out;
  return 0;
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
  eng_plan_opts o;
  eng_plan_opts_defaults(&o);
  if (max_batch) {
    // Up to 64 times the asked batch: enough to say how far it could grow.
    rc = eng_plan_max_batch(&s->config, s->seq_len, &prof, &o, s->batch * 64, max_batch, e);
    if (rc && rc != ENG_ECAP) return rc;
    if (rc) *max_batch = 0;
  }
  rc = eng_plan_make(&s->config, "job", s->batch, s->seq_len, &prof, &o, out, e);
  if (rc || !svg) return rc;
  if ((rc = timeline(s, &prof, out, svg, e))) eng_plan_free(out);
  return rc;
}
