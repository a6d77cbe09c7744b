// systemd's notification protocol (Type=notify): READY once serving,
// STATUS after changes of the queue or the running job, STOPPING when
// draining, WATCHDOG from the loop itself (so a stuck loop gets the daemon
// restarted). Without NOTIFY_SOCKET these are no-ops.
#include <stdio.h>
#include <stdlib.h>
#include <systemd/sd-daemon.h>

#include "traind.h"

static void status_send(traind *d) {
  int queued = d->n_queued;
  const char *id = sched_running_id(d);
  const job *r = id ? job_find(d, id) : NULL;
  if (r)
    sd_notifyf(0, "STATUS=%s; running %s (step %lld of %lld), %d queued", d->draining ? "draining" : "serving", r->id,
               (long long)r->progress.step, (long long)r->progress.total_steps, queued);
  else sd_notifyf(0, "STATUS=%s; idle, %d queued", d->draining ? "draining" : "serving", queued);
}

static void on_notify_timer(uv_timer_t *t) {
  traind *d = t->data;
  if (!d->notify_dirty) return;
  d->notify_dirty = 0;
  status_send(d);
  uv_timer_start(&d->t_notify, on_notify_timer, 100, 0);
}

// A burst of submissions is one STATUS, not one each (thousands a second):
// the first change is sent at once, those within the next 100 ms once it
// has passed.
void notify_status(traind *d) {
  static int unset = -1;
  if (unset < 0) unset = !getenv("NOTIFY_SOCKET");
  if (unset) return;
  if (uv_is_active((uv_handle_t *)&d->t_notify)) {
    d->notify_dirty = 1;
    return;
  }
  status_send(d);
  d->t_notify.data = d;
  uv_timer_start(&d->t_notify, on_notify_timer, 100, 0);
}
