// One store shared by threads, as the daemon shares it between its loop and
// its runners: four threads each run a job (events, checkpoints, spill put /
// get / drop) while two more write events to one shared job, interleaving
// their sequence numbers. Every value reads back as written and the shared
// job's events come out 1..N in order, none lost.
#define _XOPEN_SOURCE 700
#include <inttypes.h>
#include <pthread.h>
#include <string.h>

#include "storage/store.h"
#include "unit/tmpdir.h"

enum { RUNNERS = 4, APPENDERS = 2, ROUNDS = 6, EVENTS = 50, VALUE = 3 << 20 };

static store *st;

static void fill(uint32_t *p, size_t words, uint32_t seed) {
  for (size_t i = 0; i < words; i++) p[i] = seed * 2654435761u + (uint32_t)i;
}

static void *runner(void *arg) {
  int id = (int)(intptr_t)arg;
  eng_err e = {0};
  char job[16];
  snprintf(job, sizeof job, "runner-%d", id);
  uint32_t *v = malloc(VALUE), *w = malloc(VALUE);
  CHECK(v && w, "cannot allocate");
  for (int r = 0; r < ROUNDS; r++) {
    for (int b = 0; b < 3; b++) {
      fill(v, VALUE / 4, (uint32_t)(id * 1000 + r * 10 + b));
      CHECK_OK(store_act_put(st, job, r, b, 0, v, VALUE, &e), &e);
    }
    for (int b = 2; b >= 0; b--) {
      CHECK_OK(store_act_get(st, job, r, b, 0, w, VALUE, &e), &e);
      fill(v, VALUE / 4, (uint32_t)(id * 1000 + r * 10 + b));
      CHECK(!memcmp(v, w, VALUE), "%s: round %d boundary %d read back wrong", job, r, b);
    }
    CHECK_OK(store_act_drop(st, job, r, &e), &e);
    store_ckpt *c;
    CHECK_OK(store_ckpt_begin(st, job, r, &c, &e), &e);
    fill(v, 65536 / 4, (uint32_t)(id * 1000 + r));
    CHECK_OK(store_ckpt_put(c, "w", v, 65536, &e), &e);
    CHECK_OK(store_ckpt_commit(c, &e), &e);
    CHECK_OK(store_ckpt_keep(st, job, 2, &e), &e);
    CHECK_OK(store_event_put(st, job, (uint64_t)r + 1, &r, sizeof r, &e), &e);
    uint64_t last;
    CHECK_OK(store_event_last(st, job, &last, &e), &e);
    CHECK(last == (uint64_t)r + 1, "%s: after event %d the last is %" PRIu64, job, r + 1, last);
  }
  int64_t latest;
  CHECK_OK(store_ckpt_latest(st, job, &latest, &e), &e);
  CHECK(latest == ROUNDS - 1, "%s: last checkpoint %" PRId64, job, latest);
  CHECK_OK(store_ckpt_load(st, job, latest, "w", w, 65536, &e), &e);
  fill(v, 65536 / 4, (uint32_t)(id * 1000 + ROUNDS - 1));
  CHECK(!memcmp(v, w, 65536), "%s: the last checkpoint reads back wrong", job);
  free(v);
  free(w);
  return NULL;
}

// Appender k writes the sequence numbers k+1, k+1+APPENDERS, ...
static void *appender(void *arg) {
  int k = (int)(intptr_t)arg;
  eng_err e = {0};
  for (int i = 0; i < EVENTS; i++)
    CHECK_OK(store_event_put(st, "shared", (uint64_t)(i * APPENDERS + k + 1), "x", 1, &e), &e);
  return NULL;
}

static int count_event(void *ctx, uint64_t seq, const void *ev, size_t n) {
  uint64_t *next = ctx;
  CHECK(seq == *next && n == 1 && *(const char *)ev == 'x', "shared event %" PRIu64 " out of order", seq);
  (*next)++;
  return 0;
}

int main(void) {
  tmp_make();
  eng_err e = {0};
  store_options o;
  store_options_defaults(&o);
  o.act_buffer_bytes = 4 << 20; // several flushes per round
  CHECK_OK(store_open(&st, tmp_path("db"), &o, &e), &e);
  pthread_t t[RUNNERS + APPENDERS];
  for (int i = 0; i < RUNNERS; i++) pthread_create(&t[i], NULL, runner, (void *)(intptr_t)i);
  for (int i = 0; i < APPENDERS; i++) pthread_create(&t[RUNNERS + i], NULL, appender, (void *)(intptr_t)i);
  for (int i = 0; i < RUNNERS + APPENDERS; i++) pthread_join(t[i], NULL);
  uint64_t next = 1;
  CHECK_OK(store_event_scan(st, "shared", 1, count_event, &next, &e), &e);
  CHECK(next == APPENDERS * EVENTS + 1, "shared job: %" PRIu64 " events, expected %d", next - 1,
        APPENDERS * EVENTS);
  store_close(st);
  printf("%d runner threads (spill, checkpoints, events) and %d appenders on one store: all consistent\n",
         RUNNERS, APPENDERS);
  tmp_cleanup();
  return 0;
}
