// trainctl watch / logs: a job's events. On a terminal the step metrics
// update one live line; every other event (state change, checkpoint, log
// line), and every event when stdout is not a terminal, gets a line of its
// own. A dropped stream is resumed from the last sequence number seen, so
// nothing is missed or shown twice across daemon restarts.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trainctl.h"

#define K(x) TRAIND__V1__##x

enum { RECONNECT_TRIES = 120 }; // one a second: survives a daemon restart

static void fmt_ms(double s, char *buf, size_t n) {
  if (s < 1) snprintf(buf, n, "%.1fms", s * 1000);
  else snprintf(buf, n, "%.2fs", s);
}

// The job's limits (its steps, its spec's budgets), for the progress bar;
// zero where it has none.
typedef struct limits {
  double tokens, flops, wall;
} limits;

// How far the job is towards the limit it reaches first, if progress goes
// on as so far: the fraction done of each limit, the largest wins. The ETA
// is the wall time so far scaled to the rest of that fraction (the steps'
// own time when the job has no wall time yet).
static double progress(const Traind__V1__StepMetrics *m, const limits *lim, const char **which) {
  double f = m->total_steps > 0 ? (double)m->step / (double)m->total_steps : 0;
  *which = "steps";
  const struct {
    double spent, limit;
    const char *name;
  } b[] = {{(double)m->total_tokens, lim->tokens, "max_tokens"},
           {m->total_model_flops, lim->flops, "max_flops"},
           {m->wall_seconds, lim->wall, "max_wall_seconds"}};
  for (int i = 0; i < 3; i++)
    if (b[i].limit > 0 && b[i].spent / b[i].limit > f) f = b[i].spent / b[i].limit, *which = b[i].name;
  return f > 1 ? 1 : f;
}

static void print_step(const Traind__V1__StepMetrics *m, const limits *lim, int live) {
  char eta[32], f[16], l[16], b[16], o[16];
  const Traind__V1__Phases *p = m->phases;
  double per = p ? p->total : 0;
  const char *which;
  double done = progress(m, lim, &which);
  double left = m->wall_seconds > 0 && done > 0 ? m->wall_seconds * (1 - done) / done
                                                : per * (double)(m->total_steps - m->step);
  ctl_fmt_duration(left, eta, sizeof eta);
  fmt_ms(p ? p->forward : 0, f, sizeof f);
  fmt_ms(p ? p->loss : 0, l, sizeof l);
  fmt_ms(p ? p->backward : 0, b, sizeof b);
  fmt_ms(p ? p->optimizer_wait : 0, o, sizeof o);
  enum { BAR = 20 };
  char bar[BAR + 1];
  for (int i = 0; i < BAR; i++) bar[i] = i < (int)(done * BAR + 0.5) ? '#' : '.';
  bar[BAR] = 0;
  printf("%s[%s] %3.0f%% of %s  step %lld/%lld  loss %.4f", live ? "\r\033[K" : "", bar, 100 * done, which,
         (long long)m->step, (long long)m->total_steps, m->loss);
  if (!isnan(m->eval_loss)) printf("  eval %.4f", m->eval_loss);
  printf("  %.0f tok/s  ETA %s  fwd %s loss %s bwd %s opt %s  FLOPs %.3g", m->tokens_per_s, eta, f, l, b, o,
         m->total_model_flops);
  if (!isnan(m->mfu) && m->mfu > 0) printf("  MFU %.1f%%", 100.0 * m->mfu);
  printf("%s%s%s%s", m->skipped ? "  (skipped: non-finite)" : "", *m->stop_reason ? "  stopping: " : "",
         m->stop_reason, live ? "" : "\n");
  fflush(stdout);
}

static void print_event(const Traind__V1__JobEvent *ev, const limits *lim, int live, int *on_live_line) {
  char when[64];
  ctl_fmt_time(ev->time_ms, when, sizeof when);
  if (ev->kind_case == K(JOB_EVENT__KIND_STEP)) {
    print_step(ev->step, lim, live);
    *on_live_line = live;
    return;
  }
  if (*on_live_line) printf("\n"); // keep the last live line, start a fresh one
  *on_live_line = 0;
  switch (ev->kind_case) {
  case K(JOB_EVENT__KIND_STATE): printf("%s  %s: %s\n", when, ctl_state_name(ev->state->state), ev->state->reason); break;
  case K(JOB_EVENT__KIND_CHECKPOINT): printf("%s  checkpoint at step %lld\n", when, (long long)ev->checkpoint->step); break;
  case K(JOB_EVENT__KIND_LOG): printf("%s  %s\n", when, ev->log->text); break;
  default: printf("%s  (event %llu of a kind this trainctl does not know)\n", when, (unsigned long long)ev->seq);
  }
  fflush(stdout);
}

static int exit_for(int state) {
  return state == K(JOB_STATE__JOB_STATE_SUCCEEDED) ? EXIT_OK : EXIT_JOB_FAILED;
}

// The job's budgets from its record (none when it cannot be read: the bar
// then counts steps).
static limits limits_of(ctl *c, rpc *r, const char *job) {
  limits lim = {0};
  Traind__V1__Job *j;
  rpc_status st;
  if (ctl_get_job(c, r, job, &j, &st)) return lim;
  const Traind__V1__BudgetSpec *b = j->spec ? j->spec->budget : NULL;
  if (b) lim = (limits){(double)b->max_tokens, b->max_flops, b->max_wall_seconds};
  protobuf_c_message_free_unpacked(&j->base, NULL);
  return lim;
}

int ctl_follow(ctl *c, const char *job, uint64_t after_seq, int follow, int live) {
  rpc *r = ctl_rpc(c);
  if (!r) return EXIT_UNREACHABLE;
  const limits lim = limits_of(c, r, job);
  int last_state = 0, on_live_line = 0, tries = 0;
  for (;;) {
    Traind__V1__WatchJobRequest req = K(WATCH_JOB_REQUEST__INIT);
    req.job_id = (char *)job;
    req.after_seq = after_seq;
    req.no_follow = !follow;
    rpc_stream *s;
    rpc_status st;
    ProtobufCMessage *m;
    int got = 0;
    if (rpc_stream_open(r, "/traind.v1.Trainer/WatchJob", &req.base, 0, &s, &st) == 0) {
      while (rpc_stream_next(s, &traind__v1__job_event__descriptor, &m, &st) == 1) {
        const Traind__V1__JobEvent *ev = (const Traind__V1__JobEvent *)m;
        after_seq = ev->seq;
        got = 1;
        if (ev->kind_case == K(JOB_EVENT__KIND_STATE)) last_state = ev->state->state;
        if (c->json) ctl_print_json(m);
        else print_event(ev, &lim, live, &on_live_line);
        protobuf_c_message_free_unpacked(m, NULL);
      }
      rpc_stream_close(s);
    }
    if (on_live_line) printf("\n");
    on_live_line = 0;
    if (st.code == GRPC_STATUS_OK) break;
    // Gone daemon (restart, drain): reconnect after the last event seen.
    if (st.code != GRPC_STATUS_UNAVAILABLE || (!got && ++tries > RECONNECT_TRIES)) return ctl_fail("watch", &st);
    if (got) tries = 0;
    fprintf(stderr, "trainctl: watch: %s (%s); reconnecting after event %llu\n", rpc_code_name(st.code), st.msg,
            (unsigned long long)after_seq);
    sleep(1);
  }
  if (!follow) return EXIT_OK;
  if (!last_state) { // the stream resumed after the final state change: ask
    Traind__V1__Job *j;
    rpc_status st;
    if (ctl_get_job(c, r, job, &j, &st)) return ctl_fail("watch", &st);
    last_state = j->state;
    protobuf_c_message_free_unpacked(&j->base, NULL);
  }
  return exit_for(last_state);
}

typedef struct watch_opts {
  uint64_t from;
  int follow;
} watch_opts;

static int parse(ctl *c, int argc, char **argv, const struct option *own, watch_opts *w) {
  struct option *opts = ctl_opts(own);
  int opt, bad = 0;
  while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    if (opt == 'f') { // logs --follow
      w->follow = 1;
    } else if (opt == 'F') {
      char *end;
      w->from = strtoull(optarg, &end, 10);
      if (*end) {
        fprintf(stderr, "trainctl watch: --from %s: expected a sequence number\n", optarg);
        bad = 1;
      }
    } else if (!ctl_global(c, opt, optarg)) {
      bad = 1;
    }
  }
  free(opts);
  if (!bad && optind != argc - 1) {
    fprintf(stderr, "trainctl %s: expected one job id\n", argv[0]);
    bad = 1;
  }
  return bad ? -1 : optind;
}

int cmd_watch(ctl *c, int argc, char **argv) {
  static const struct option own[] = {{"from", required_argument, 0, 'F'}, {0, 0, 0, 0}};
  watch_opts w = {0, 1};
  int i = parse(c, argc, argv, own, &w);
  if (i < 0) return EXIT_USAGE;
  // --from N shows the events after N: the last one a previous watch saw.
  return ctl_follow(c, argv[i], w.from, 1, !c->json && isatty(STDOUT_FILENO));
}

int cmd_logs(ctl *c, int argc, char **argv) {
  static const struct option own[] = {{"follow", no_argument, 0, 'f'}, {0, 0, 0, 0}};
  watch_opts w = {0, 0};
  int i = parse(c, argc, argv, own, &w);
  if (i < 0) return EXIT_USAGE;
  int rc = ctl_follow(c, argv[i], 0, w.follow, 0);
  return w.follow ? rc : (rc == EXIT_JOB_FAILED ? EXIT_OK : rc);
}
