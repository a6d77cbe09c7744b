// A watcher that reconnects from the last sequence number it saw receives
// every later event exactly once: across a client-side disconnect, and
// (through trainctl watch, which reconnects by itself) across a daemon
// drain and restart in the middle of the job.
#define _GNU_SOURCE
#include <jansson.h>

#include "e2e/daemon.h"

#define K(x) TRAIND__V1__##x

// Reads events after `after` into seqs (up to max or the end); returns how
// many and leaves the stream's final status in *code (-1: left early).
static int read_events(td *t, const char *job, uint64_t after, int max, uint64_t *seqs, int *code) {
  Traind__V1__WatchJobRequest w = K(WATCH_JOB_REQUEST__INIT);
  w.job_id = (char *)job;
  w.after_seq = after;
  rpc_stream *s;
  rpc_status st;
  CHECK(rpc_stream_open(t->r, "/traind.v1.Trainer/WatchJob", &w.base, 0, &s, &st) == 0, "open watch");
  int n = 0;
  ProtobufCMessage *m;
  *code = -1;
  while (n < max) {
    if (rpc_stream_next(s, &traind__v1__job_event__descriptor, &m, &st) != 1) {
      *code = st.code;
      break;
    }
    Traind__V1__JobEvent *ev = (Traind__V1__JobEvent *)m;
    CHECK(!strcmp(ev->job_id, job), "an event of job %s in the watch of %s", ev->job_id, job);
    seqs[n++] = ev->seq;
    protobuf_c_message_free_unpacked(m, NULL);
  }
  rpc_stream_close(s);
  return n;
}

static uint64_t last_seq(td *t, const char *job) {
  Traind__V1__Job *j = td_get(t, job);
  uint64_t s = j->last_seq;
  protobuf_c_message_free_unpacked(&j->base, NULL);
  return s;
}

static void check_complete(const uint64_t *seqs, int n, uint64_t last, const char *what) {
  for (int i = 0; i < n; i++) CHECK(seqs[i] == (uint64_t)i + 1, "%s: event %d has seq %llu", what, i, (unsigned long long)seqs[i]);
  CHECK((uint64_t)n == last, "%s: %d events seen, the job has %llu", what, n, (unsigned long long)last);
}

int main(void) {
  td t;
  td_init(&t);
  td_start(&t);
  const char *file = td_jobfile("watch.yaml", 80, 20, NULL);
  char job[80];
  snprintf(job, sizeof job, "%s", td_submit(&t, file, NULL));

  // A watcher that leaves after 10 events and comes back from the last one.
  enum { MAX = 4096 };
  uint64_t *seqs = calloc(MAX, sizeof *seqs);
  int code, n = read_events(&t, job, 0, 10, seqs, &code);
  CHECK(n == 10, "the first watch got %d events", n);
  n += read_events(&t, job, seqs[n - 1], MAX - n, seqs + n, &code);
  CHECK(code == GRPC_STATUS_OK, "the stream of a finished job ended with %d", code);
  Traind__V1__Job *j = td_get(&t, job);
  CHECK(j->state == K(JOB_STATE__JOB_STATE_SUCCEEDED), "the stream ended before the job did");
  protobuf_c_message_free_unpacked(&j->base, NULL);
  check_complete(seqs, n, last_seq(&t, job), "reconnect");
  printf("client reconnect: %d events, each once\n", n);

  // trainctl watch across a drain and restart of the daemon.
  const char *slow = td_jobfile("slow.yaml", 400, 100, NULL);
  char job2[80];
  snprintf(job2, sizeof job2, "%s", td_submit(&t, slow, NULL));
  char out[600], cmd[4000];
  snprintf(out, sizeof out, "%s/watch.jsonl", tmp_root);
  snprintf(cmd, sizeof cmd, "TRAIND_ADDR=%s %s watch --json %s > %s 2>%s.err", t.sock, t.bin_trainctl, job2, out, out);
  pid_t w = fork();
  if (w == 0) {
    execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
    _exit(127);
  }
  td_wait_step(&t, job2, 50, 120);
  int st = td_stop(&t, SIGTERM, 30, NULL);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "drain exit status %d", st);
  td_start(&t);
  CHECK(waitpid(w, &st, 0) == w && WIFEXITED(st), "trainctl watch did not end");
  CHECK(WEXITSTATUS(st) == 0, "trainctl watch exited %d (see %s.err)", WEXITSTATUS(st), out);
  FILE *f = fopen(out, "r");
  char line[8192];
  n = 0;
  while (f && fgets(line, sizeof line, f) && n < MAX) {
    json_error_t je;
    json_t *ev = json_loads(line, 0, &je);
    CHECK(ev, "trainctl watch --json printed a line that is not JSON: %s", line);
    seqs[n++] = (uint64_t)json_integer_value(json_object_get(ev, "seq"));
    json_decref(ev);
  }
  if (f) fclose(f);
  check_complete(seqs, n, last_seq(&t, job2), "trainctl watch across a restart");
  printf("trainctl watch across a drain and restart: %d events, each once\n", n);
  free(seqs);
  td_finish(&t);
  return 0;
}
