// A worker: one thread running submitted jobs in FIFO order. The executor
// uses one per "stream" (copy-in, copy-out, optimizer) as DESIGN §2 describes
// for the cpu backend: submit returns a ticket, wait blocks until that job and
// every job before it has finished.
#ifndef ENG_COMMON_WORKER_H
#define ENG_COMMON_WORKER_H

#include <pthread.h>
#include <stdint.h>

typedef void (*eng_job_fn)(void *arg);

typedef struct eng_job {
  eng_job_fn fn;
  void *arg;
} eng_job;

typedef struct eng_worker {
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  eng_job *ring;       // capacity entries
  uint32_t capacity;
  uint64_t submitted;  // tickets handed out (ticket k is the k-th job, from 1)
  uint64_t done;       // jobs finished
  int stop;
  int started;
  const char *name;    // the thread's name (top -H), a literal
} eng_worker;

// capacity bounds the jobs queued at once; submit blocks when it is full.
// name (15 characters at most) names the thread.
int eng_worker_start(eng_worker *w, uint32_t capacity, const char *name);
uint64_t eng_worker_submit(eng_worker *w, eng_job_fn fn, void *arg);
void eng_worker_wait(eng_worker *w, uint64_t ticket);
// Waits for every job submitted so far.
void eng_worker_drain(eng_worker *w);
void eng_worker_stop(eng_worker *w);

#endif
