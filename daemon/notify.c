// systemd's notification protocol (Type=notify): READY once serving,
// STATUS after every change of the queue or the running job, STOPPING when
// draining, WATCHDOG from the loop itself (so a stuck loop gets the daemon
// restarted). Without NOTIFY_SOCKET these are no-ops.
#include <stdio.h>
#include <systemd/sd-daemon.h>

#include "traind.h"

void notify_status(traind *d) {
  int queued = d->n_queued;
  const char *id = sched_running_id(d);
  const job *r = id ? job_find(d, id) : NULL;
  if (r)
    sd_notifyf(0, "STATUS=%s; running %s (step %lld of %lld), %d queued", d->draining ? "draining" : "serving", r->id,
               (long long)r->progress.step, (long long)r->progress.total_steps, queued);
  else sd_notifyf(0, "STATUS=%s; idle, %d queued", d->draining ? "draining" : "serving", queued);
}
