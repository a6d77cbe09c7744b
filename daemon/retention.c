// Retention: finished jobs (their records, events and checkpoints) beyond
// the configured count, oldest first, or older than the configured age, are
// deleted. Runs after every job that finishes and once a minute.
#include "log.h"
#include "traind.h"

void retention_run(traind *d) {
  size_t finished = 0;
  for (size_t i = 0; i < d->n_all; i++) finished += job_finished(d->all[i]);
  size_t excess = d->cfg.retention_jobs > 0 && finished > (size_t)d->cfg.retention_jobs
                      ? finished - (size_t)d->cfg.retention_jobs
                      : 0;
  int64_t cutoff = d->cfg.retention_age_s > 0 ? now_ms() - d->cfg.retention_age_s * 1000 : INT64_MIN;
  for (size_t i = 0; i < d->n_all;) {
    job *j = d->all[i];
    int old = job_finished(j) && j->finished_ms < cutoff;
    if (!job_finished(j) || (!excess && !old)) {
      i++;
      continue;
    }
    eng_err e = {0};
    char id[sizeof j->id];
    snprintf(id, sizeof id, "%s", j->id);
    if (job_delete(d, j, &e)) { // stays; the next run tries again
      log_err("retention: deleting job %s failed: %s", id, e.msg);
      return;
    }
    log_info("retention: deleted job %s", id);
    if (excess) excess--;
  }
}
