// traind: the training daemon. Startup, signals (SIGTERM/SIGINT drain,
// SIGHUP reloads the config), timers (retention, watchdog, drain bound),
// shutdown.
#include <errno.h>
#include <getopt.h>
#include <grpc/grpc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "api.h"
#include "commit.h"
#include "log.h"
#include "metrics.h"
#include "planning.h"
#include "traind.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: traind [options]\n"
          "The training daemon: a persistent job queue and the engine behind a gRPC API\n"
          "(proto/traind/v1/traind.proto) on a Unix socket, TCP optional.\n"
          "\n"
          "  --config FILE      config file (default /etc/traind/traind.conf when it exists)\n"
          "  --no-config        read no config file\n"
          "  --state-dir DIR    where the database lives (config state_dir)\n"
          "  --socket PATH      the Unix socket (config socket)\n"
          "  --data-root DIR    a directory job paths may lie under; repeat for more\n"
          "  --set KEY=VALUE    any config key, as in the file\n"
          "  --check-config     load the config, print the effective values, exit\n"
          "  --version          print the version\n"
          "\n"
          "Signals: SIGTERM/SIGINT drain (checkpoint and requeue the running job, exit 0),\n"
          "SIGHUP rereads the config file (kept as it was when the file is not a regular\n"
          "file, has an error, or names no data_root where there were some).\n"
          "Config keys and their defaults: deploy/traind.conf; --check-config prints them.\n"
          "Logs go to stderr.\n"
          "Exit codes: 0 clean stop, 1 startup failed (the message says why), 2 bad usage.\n");
}

static traind D;

// ---- shutdown ------------------------------------------------------------------

static void close_handle(uv_handle_t *h) {
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

static void on_server_stopped(void *arg) {
  traind *d = arg;
  sched_stop(d);
  commit_stop(d->commit);
  metrics_stop(d->metrics);
  d->metrics = NULL;
  close_handle((uv_handle_t *)&d->sig_term);
  close_handle((uv_handle_t *)&d->sig_int);
  close_handle((uv_handle_t *)&d->sig_hup);
  close_handle((uv_handle_t *)&d->t_retention);
  close_handle((uv_handle_t *)&d->t_watchdog);
  close_handle((uv_handle_t *)&d->t_drain);
  close_handle((uv_handle_t *)&d->t_notify);
  log_info("stopped");
}

static void on_drained(traind *d) {
  uv_timer_stop(&d->t_drain);
  log_info("drained; closing the server");
  srv_stop(d->srv, on_server_stopped, d);
}

// The bound on a drain: the store survives a process that ends mid-write,
// so a job still checkpointing simply resumes from its previous checkpoint.
static void on_drain_timeout(uv_timer_t *t) {
  traind *d = t->data;
  log_err("drain: the running job did not checkpoint within %d s; exiting anyway (it resumes from its last "
          "checkpoint after a restart)",
          d->cfg.drain_timeout_s);
  sched_abandon(d);
  commit_stop(d->commit); // the job's record as queued, on the disk before the exit
  _exit(0);
}

static void on_stop_signal(uv_signal_t *s, int signum) {
  traind *d = s->data;
  if (d->draining) {
    log_warn("%s again while draining; still waiting for the checkpoint", strsignal(signum));
    return;
  }
  log_info("%s: draining (checkpoint and requeue the running job)", strsignal(signum));
  sd_notify(0, "STOPPING=1");
  d->draining = 1;
  notify_status(d);
  uv_timer_start(&d->t_drain, on_drain_timeout, (uint64_t)d->cfg.drain_timeout_s * 1000, 0);
  sched_drain(d, on_drained);
}

// ---- config -------------------------------------------------------------------------

static int read_token(const cfg *c, char **out, char *err, size_t errlen) {
  *out = NULL;
  if (!c->token_file) return 0;
  FILE *f = fopen(c->token_file, "r");
  if (!f) {
    snprintf(err, errlen, "token_file: %s: %s", c->token_file, strerror(errno));
    return -1;
  }
  char buf[512] = "";
  if (!fgets(buf, sizeof buf, f)) buf[0] = 0;
  fclose(f);
  buf[strcspn(buf, "\r\n")] = 0;
  if (strlen(buf) < 16) {
    snprintf(err, errlen, "token_file: %s: the token must be at least 16 characters", c->token_file);
    return -1;
  }
  *out = strdup(buf);
  return 0;
}

static void on_hup(uv_signal_t *s, int signum) {
  (void)signum;
  traind *d = s->data;
  cfg next = {0};
  char err[1024];
  char *token = NULL;
  if (cfg_load(&next, d->config_path, &d->over, err, sizeof err) || read_token(&next, &token, err, sizeof err)) {
    log_err("SIGHUP: keeping the current config: %s", err);
    cfg_free(&next);
    return;
  }
  // A file caught empty or half-written (an editor's save, a config tool)
  // would refuse every job: no data root where there were some.
  if (next.n_roots == 0 && d->cfg.n_roots > 0) {
    log_err("SIGHUP: keeping the current config: %s names no data_root, which would refuse every job (the current "
            "config has %d)",
            d->config_path ? d->config_path : "the command line", d->cfg.n_roots);
    cfg_free(&next);
    free(token);
    return;
  }
  // What the running process is built around stays as it is.
  const char *fixed[][3] = {{"state_dir", d->cfg.state_dir, next.state_dir},
                            {"socket", d->cfg.socket_path, next.socket_path},
                            {"tcp", d->cfg.tcp, next.tcp},
                            {"tls_cert", d->cfg.tls_cert, next.tls_cert},
                            {"tls_key", d->cfg.tls_key, next.tls_key},
                            {"metrics_listen", d->cfg.metrics_listen, next.metrics_listen}};
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
    const char *a = fixed[i][1] ? fixed[i][1] : "", *b = fixed[i][2] ? fixed[i][2] : "";
    if (strcmp(a, b)) log_warn("SIGHUP: %s changed; that takes a restart", fixed[i][0]);
  }
  const struct {
    const char *key;
    int *now, *next;
  } fixed_num[] = {{"max_message_bytes", &d->cfg.max_message_bytes, &next.max_message_bytes},
                   {"max_connections", &d->cfg.max_connections, &next.max_connections},
                   {"max_streams", &d->cfg.max_streams, &next.max_streams}};
  for (size_t i = 0; i < sizeof fixed_num / sizeof fixed_num[0]; i++) {
    if (*fixed_num[i].next != *fixed_num[i].now) log_warn("SIGHUP: %s changed; that takes a restart", fixed_num[i].key);
    *fixed_num[i].next = *fixed_num[i].now;
  }
#define KEEP(f)                                                                                      \
  do {                                                                                               \
    char *t_ = next.f;                                                                               \
    next.f = d->cfg.f;                                                                               \
    d->cfg.f = t_;                                                                                   \
  } while (0)
  KEEP(state_dir);
  KEEP(socket_path);
  KEEP(tcp);
  KEEP(tls_cert);
  KEEP(tls_key);
#undef KEEP
  cfg_free(&d->cfg);
  d->cfg = next;
  log_level_set(d->cfg.log_level);
  free(d->token);
  d->token = token;
  if (d->cfg.tcp) srv_token_set(d->srv, d->token);
  d->config_gen++; // the jobs held for their paths get another look
  log_info("SIGHUP: config reloaded (%d data roots, retention %d jobs / %lld s)", d->cfg.n_roots,
           d->cfg.retention_jobs, (long long)d->cfg.retention_age_s);
  retention_run(d);
  sched_kick(d);
}

// ---- timers -------------------------------------------------------------------------

static void on_retention(uv_timer_t *t) { retention_run(t->data); }

static void on_watchdog(uv_timer_t *t) {
  (void)t;
  sd_notify(0, "WATCHDOG=1");
}

// ---- startup ------------------------------------------------------------------------

static char *read_file(const char *path, char *err, size_t errlen) {
  FILE *f = fopen(path, "r");
  if (!f) {
    snprintf(err, errlen, "%s: %s", path, strerror(errno));
    return NULL;
  }
  char *buf = NULL;
  size_t n = 0;
  FILE *m = open_memstream(&buf, &n);
  char chunk[4096];
  size_t k;
  while (m && (k = fread(chunk, 1, sizeof chunk, f)) > 0) fwrite(chunk, 1, k, m);
  fclose(f);
  if (m) fclose(m);
  return buf;
}

static int mkdir_p(const char *dir, mode_t mode) {
  char buf[4200];
  snprintf(buf, sizeof buf, "%s", dir);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(buf, mode) && errno != EEXIST) return -1;
    *p = '/';
  }
  return mkdir(buf, mode) && errno != EEXIST ? -1 : 0;
}

static int parse_args(int argc, char **argv, traind *d, int *check) {
  static const struct option opts[] = {
      {"config", required_argument, 0, 'c'},    {"no-config", no_argument, 0, 'n'},
      {"state-dir", required_argument, 0, 's'}, {"socket", required_argument, 0, 'S'},
      {"data-root", required_argument, 0, 'r'}, {"set", required_argument, 0, 'o'},
      {"check-config", no_argument, 0, 'C'},    {"version", no_argument, 0, 'V'},
      {"help", no_argument, 0, 'h'},            {0, 0, 0, 0}};
  int no_config = 0, opt;
  char err[1024];
  cfg_unset(&d->over);
  while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    const char *key = NULL;
    char kv[4200];
    switch (opt) {
    case 'c': d->config_path = optarg; break;
    case 'n': no_config = 1; break;
    case 's': key = "state_dir"; break;
    case 'S': key = "socket"; break;
    case 'r': key = "data_root"; break;
    case 'o': {
      snprintf(kv, sizeof kv, "%s", optarg);
      char *eq = strchr(kv, '=');
      if (!eq) {
        fprintf(stderr, "traind: --set %s: expected KEY=VALUE\n", optarg);
        return 2;
      }
      *eq = 0;
      if (cfg_set(&d->over, kv, eq + 1, err, sizeof err)) {
        fprintf(stderr, "traind: --set %s\n", err);
        return 2;
      }
      break;
    }
    case 'C': *check = 1; break;
    case 'V': printf("traind %s\n", TRAIND_VERSION); return 0;
    case 'h': usage(stdout); return 0;
    default: usage(stderr); return 2;
    }
    if (key && cfg_set(&d->over, key, optarg, err, sizeof err)) {
      fprintf(stderr, "traind: --%s\n", err);
      return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "traind: unexpected argument \"%s\"\n", argv[optind]);
    return 2;
  }
  if (!no_config && !d->config_path && access("/etc/traind/traind.conf", F_OK) == 0)
    d->config_path = "/etc/traind/traind.conf";
  if (no_config) d->config_path = NULL;
  return -1;
}

static void print_config(const cfg *c) {
  printf("state_dir = %s\nsocket = %s\nsocket_mode = %04o\ntcp = %s\n", c->state_dir, c->socket_path, c->socket_mode,
         c->tcp ? c->tcp : "");
  for (int i = 0; i < c->n_roots; i++) printf("data_root = %s\n", c->roots[i]);
  if (c->admin_group) printf("admin_group = %s\n", c->admin_group);
  if (c->metrics_listen) printf("metrics_listen = %s\n", c->metrics_listen);
  printf("max_message_bytes = %d\nmax_connections = %d\nmax_streams = %d\nretention_jobs = %d\nretention_age_s = %lld\n"
         "drain_timeout_s = %d\ncheckpoint_every = %d\ncheckpoint_keep = %d\ncpu_memory_bytes = %lld\n"
         "metrics_interval_ms = %d\nhost_memory_bytes = %lld\nmax_crashes = %d\nmax_queued_jobs = %d\n"
         "runner_nice = %d\nrunner_idle = %d\n",
         c->max_message_bytes, c->max_connections, c->max_streams, c->retention_jobs, (long long)c->retention_age_s,
         c->drain_timeout_s, c->checkpoint_every, c->checkpoint_keep, (long long)c->cpu_memory_bytes,
         c->metrics_interval_ms, (long long)c->host_memory_bytes, c->max_crashes, c->max_queued_jobs,
         c->runner_nice, c->runner_idle);
}

// Descriptors: the soft limit raised to the hard one (systemd's soft 1024
// is for select() users; the daemon polls), and enough of them for every
// connection the config allows next to the jobs' files and the database.
static void nofile_raise(const cfg *c) {
  struct rlimit r;
  if (getrlimit(RLIMIT_NOFILE, &r)) return;
  if (r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
    getrlimit(RLIMIT_NOFILE, &r);
  }
  if ((rlim_t)c->max_connections * 2 > r.rlim_cur)
    log_warn("max_connections %d is more than half the descriptors this process may open (%llu): clients may use "
             "up what jobs need",
             c->max_connections, (unsigned long long)r.rlim_cur);
}

static int start(traind *d) {
  char err[1024];
  nofile_raise(&d->cfg);
  if (mkdir_p(d->cfg.state_dir, 0750)) {
    log_err("state_dir %s: %s", d->cfg.state_dir, strerror(errno));
    return -1;
  }
  if (d->cfg.n_roots == 0) log_warn("no data_root configured: every job will be refused");
  if (read_token(&d->cfg, &d->token, err, sizeof err)) {
    log_err("%s", err);
    return -1;
  }
  char path[4200];
  snprintf(path, sizeof path, "%s/export", d->cfg.state_dir);
  if (mkdir_p(path, 0750)) {
    log_err("%s: %s", path, strerror(errno));
    return -1;
  }
  api_export_scratch_clear(path);
  snprintf(path, sizeof path, "%s/db", d->cfg.state_dir);
  eng_err e = {0};
  store_options so;
  store_options_defaults(&so);
  so.group_commit = 1; // synced by daemon/commit.c, off the loop
  if (store_open(&d->st, path, &so, &e)) {
    log_err("storage: %s", e.msg);
    return -1;
  }
  if (commit_start(&d->commit, d->loop, d->st)) {
    log_err("storage: cannot start the group-commit thread");
    return -1;
  }
  // Point-in-time recovery keeps the database whole and loses the writes
  // made last (job records, events): say so, and how much.
  for (const char *w = store_wal_dropped(d->st); w && *w;) {
    size_t k = strcspn(w, "\n");
    log_warn("storage: recovery dropped a write-ahead log tail that failed its checksum (the daemon's last writes "
             "before it ended are lost; jobs are as of before them): %.*s",
             (int)k, w);
    w += k + (w[k] == '\n');
  }
  if (jobs_load(d, &e)) {
    log_err("storage: loading the jobs: %s", e.msg);
    return -1;
  }
  if (planning_open(&d->planning, d->cfg.profile_file, d->cfg.profile_override, d->st, d->cfg.state_dir, &e)) {
    log_err("profile_file / profile_override: %s", e.msg);
    return -1;
  }
  log_info("loaded %zu jobs from %s", d->n_all, path);

  char *cert = NULL, *key = NULL;
  if (d->cfg.tcp && (!(cert = read_file(d->cfg.tls_cert, err, sizeof err)) ||
                     !(key = read_file(d->cfg.tls_key, err, sizeof err)))) {
    log_err("tls: %s", err);
    free(cert);
    return -1;
  }
  // A client that resets more calls than this per second before they are
  // answered is flooding (HTTP/2 rapid reset); trainctl resets none.
  enum { MAX_RESETS_PER_S = 200 };
  srv_options o = {.unix_path = d->cfg.socket_path,
                   .unix_mode = d->cfg.socket_mode,
                   .max_conns = d->cfg.max_connections,
                   .max_resets = MAX_RESETS_PER_S,
                   .max_streams = d->cfg.max_streams,
                   .tcp_addr = d->cfg.tcp,
                   .tls_cert_pem = cert,
                   .tls_key_pem = key,
                   .max_message_bytes = d->cfg.max_message_bytes,
                   .methods = api_methods,
                   .n_methods = api_n_methods,
                   .data = d};
  int rc = srv_start(&d->srv, d->loop, &o, err, sizeof err);
  free(cert);
  free(key);
  if (rc) {
    log_err("%s", err);
    return -1;
  }
  if (d->cfg.tcp) srv_token_set(d->srv, d->token);
  log_info("listening on unix:%s (mode %04o)", d->cfg.socket_path, d->cfg.socket_mode);
  if (d->cfg.metrics_listen) {
    if (metrics_start(&d->metrics, d, d->cfg.metrics_listen, err, sizeof err)) {
      log_err("%s", err);
      return -1;
    }
    log_info("metrics on http://%s/metrics", d->cfg.metrics_listen);
  }
  if (sched_start(d)) {
    log_err("cannot start the cpu runner");
    return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  traind *d = &D;
  int check = 0;
  int rc = parse_args(argc, argv, d, &check);
  if (rc >= 0) return rc;
  char err[1024];
  if (cfg_load(&d->cfg, d->config_path, &d->over, err, sizeof err)) {
    fprintf(stderr, "traind: config: %s\n", err);
    return 1;
  }
  if (check) {
    print_config(&d->cfg);
    return 0;
  }
  log_level_set(d->cfg.log_level);
  // The cpu products' route, once for the process: a TRAIND_CPU_GEMM that
  // names a route this cpu lacks refuses the start, not every job later.
  const char *route, *core;
  eng_err ge = {0};
  if (eng_cpu_gemm_route(&route, &core, &ge)) {
    fprintf(stderr, "traind: %s\n", ge.msg);
    return 1;
  }
  log_info("cpu products on the %s route%s%s", route, *core ? ", OpenBLAS core " : "", core);
  signal(SIGPIPE, SIG_IGN);
  d->loop = uv_default_loop();
  d->started_ms = now_ms();
  grpc_init();
  uv_signal_init(d->loop, &d->sig_term);
  uv_signal_init(d->loop, &d->sig_int);
  uv_signal_init(d->loop, &d->sig_hup);
  uv_timer_init(d->loop, &d->t_retention);
  uv_timer_init(d->loop, &d->t_watchdog);
  uv_timer_init(d->loop, &d->t_drain);
  uv_timer_init(d->loop, &d->t_notify);
  d->sig_term.data = d->sig_int.data = d->sig_hup.data = d;
  d->t_retention.data = d->t_watchdog.data = d->t_drain.data = d;
  // Signals first: a SIGTERM during startup must not kill the process midway.
  uv_signal_start(&d->sig_term, on_stop_signal, SIGTERM);
  uv_signal_start(&d->sig_int, on_stop_signal, SIGINT);
  uv_signal_start(&d->sig_hup, on_hup, SIGHUP);

  int exit_code = 0;
  if (start(d)) {
    exit_code = 1;
    if (d->srv) {
      srv_stop(d->srv, on_server_stopped, d);
    } else {
      sched_stop(d);
      on_server_stopped(d);
    }
  } else {
    retention_run(d);
    uv_timer_start(&d->t_retention, on_retention, 60000, 60000);
    uint64_t wd_us;
    if (sd_watchdog_enabled(0, &wd_us) > 0) uv_timer_start(&d->t_watchdog, on_watchdog, 0, wd_us / 2000);
    sd_notify(0, "READY=1");
    notify_status(d);
  }
  uv_run(d->loop, UV_RUN_DEFAULT);
  planning_close(d->planning);
  commit_free(d->commit);
  if (d->st) store_close(d->st);
  jobs_free(d);
  cfg_free(&d->cfg);
  cfg_free(&d->over);
  free(d->token);
  uv_loop_close(d->loop);
  grpc_shutdown();
  return exit_code;
}
