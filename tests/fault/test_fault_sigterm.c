// SIGTERM while a job trains: the daemon checkpoints it, requeues it and
// exits 0 within 30 s; after a restart the job resumes from that checkpoint
// and finishes with the loss of an uninterrupted run.
#define _GNU_SOURCE
#include "e2e/daemon.h"

int main(void) {
  td t;
  td_init(&t);
  td_start(&t);
  const char *file = td_jobfile("drain.yaml", 120, 50, NULL);
  char a[80], b[80];
  snprintf(a, sizeof a, "%s", td_submit(&t, file, NULL));
  td_wait_step(&t, a, 30, 120);
  double took;
  int st = td_stop(&t, SIGTERM, 30, &took);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "traind did not exit 0 after SIGTERM (status %d)", st);
  printf("drained in %.2f s, exit 0\n", took);

  td_start(&t);
  char logs[1 << 16];
  td_logs(&t, a, logs, sizeof logs);
  CHECK(strstr(logs, "QUEUED: the daemon is shutting down; resumes after its restart"), "no requeue event:\n%s", logs);
  // Stopped between two regular checkpoints (50, 100): the drain saved its own.
  Traind__V1__Job *ja = td_wait_done(&t, a, 300);
  td_logs(&t, a, logs, sizeof logs);
  const char *p = strstr(logs, "resumed from the checkpoint at step ");
  CHECK(p, "the job did not resume from a checkpoint:\n%s", logs);
  long from = atol(p + strlen("resumed from the checkpoint at step "));
  CHECK(from >= 30, "resumed from step %ld, expected the drain's checkpoint (>= 30)", from);
  CHECK(ja->state == TRAIND__V1__JOB_STATE__JOB_STATE_SUCCEEDED, "job %s ended %d: %s", a, ja->state, ja->error);

  snprintf(b, sizeof b, "%s", td_submit(&t, file, NULL));
  Traind__V1__Job *jb = td_wait_done(&t, b, 300);
  CHECK(!memcmp(&ja->progress->loss, &jb->progress->loss, sizeof(double)),
        "final loss after the drain %.17g != uninterrupted %.17g", ja->progress->loss, jb->progress->loss);
  printf("resumed from step %ld after the restart; final loss bit-identical (%.17g)\n", from, ja->progress->loss);
  protobuf_c_message_free_unpacked(&ja->base, NULL);
  protobuf_c_message_free_unpacked(&jb->base, NULL);
  td_finish(&t);
  return 0;
}
