#define _GNU_SOURCE // pthread_setname_np
#include "common/worker.h"

#include <pthread.h>
#include <stdlib.h>

static void *worker_main(void *p) {
  eng_worker *w = p;
  pthread_setname_np(pthread_self(), w->name);
  pthread_mutex_lock(&w->mu);
  for (;;) {
    while (!w->stop && w->done == w->submitted) pthread_cond_wait(&w->cv, &w->mu);
    if (w->done == w->submitted) break; // stop requested and nothing left
    eng_job job = w->ring[w->done % w->capacity];
    pthread_mutex_unlock(&w->mu);
    job.fn(job.arg);
    pthread_mutex_lock(&w->mu);
    w->done++;
    pthread_cond_broadcast(&w->cv);
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

int eng_worker_start(eng_worker *w, uint32_t capacity, const char *name) {
  w->ring = calloc(capacity, sizeof *w->ring);
  if (!w->ring) return -1;
  w->capacity = capacity;
  w->name = name;
  w->submitted = w->done = 0;
  w->stop = 0;
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, NULL);
  if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
    free(w->ring);
    w->ring = NULL;
    return -1;
  }
  w->started = 1;
  return 0;
}

uint64_t eng_worker_submit(eng_worker *w, eng_job_fn fn, void *arg) {
  pthread_mutex_lock(&w->mu);
  while (w->submitted - w->done >= w->capacity) pthread_cond_wait(&w->cv, &w->mu);
  w->ring[w->submitted % w->capacity] = (eng_job){fn, arg};
  uint64_t ticket = ++w->submitted;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  return ticket;
}

void eng_worker_wait(eng_worker *w, uint64_t ticket) {
  pthread_mutex_lock(&w->mu);
  while (w->done < ticket) pthread_cond_wait(&w->cv, &w->mu);
  pthread_mutex_unlock(&w->mu);
}

void eng_worker_drain(eng_worker *w) {
  if (!w->started) return;
  pthread_mutex_lock(&w->mu);
  uint64_t t = w->submitted;
  while (w->done < t) pthread_cond_wait(&w->cv, &w->mu);
  pthread_mutex_unlock(&w->mu);
}

void eng_worker_stop(eng_worker *w) {
  if (!w->started) return;
  pthread_mutex_lock(&w->mu);
  w->stop = 1;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  pthread_join(w->thread, NULL);
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->cv);
  free(w->ring);
  w->ring = NULL;
  w->started = 0;
}
