#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "log.h"

void cfg_unset(cfg *o) {
  memset(o, 0, sizeof *o);
  o->socket_mode = UINT32_MAX;
  o->max_connections = o->max_streams = -1;
  o->max_message_bytes = o->retention_jobs = o->drain_timeout_s = -1;
  o->checkpoint_every = o->checkpoint_keep = o->metrics_interval_ms = o->log_level = -1;
  o->retention_age_s = o->cpu_memory_bytes = o->host_memory_bytes = -1;
  o->max_crashes = o->max_queued_jobs = o->runner_nice = o->runner_idle = -1;
}

void cfg_free(cfg *c) {
  free(c->state_dir);
  free(c->socket_path);
  free(c->tcp);
  free(c->tls_cert);
  free(c->tls_key);
  free(c->token_file);
  free(c->profile_file);
  free(c->profile_override);
  free(c->admin_group);
  free(c->metrics_listen);
  for (int i = 0; i < c->n_roots; i++) free(c->roots[i]);
  memset(c, 0, sizeof *c);
}

static void set_str(char **dst, const char *v) {
  free(*dst);
  *dst = v && *v ? strdup(v) : NULL;
}

static char *trim(char *s) {
  while (isspace((unsigned char)*s)) s++;
  char *e = s + strlen(s);
  while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
  return s;
}

// A whole-string integer in [lo, hi] with an optional K/M/G/T suffix (bytes).
static int parse_int(const char *v, int64_t lo, int64_t hi, int suffix, int64_t *out) {
  errno = 0;
  char *end;
  long long x = strtoll(v, &end, 0);
  if (errno || end == v) return -1;
  int64_t mul = 1;
  if (suffix && *end) {
    const char *u = "KMGT";
    const char *p = strchr(u, toupper((unsigned char)*end));
    if (!p || end[1]) return -1;
    mul = (int64_t)1 << (10 * (p - u + 1));
    end++;
  }
  if (*end || x < lo / mul || x > hi / mul) return -1;
  *out = (int64_t)x * mul;
  return 0;
}

static int add_root(cfg *c, const char *v, char *err, size_t errlen, const char *where) {
  if (c->n_roots == CFG_MAX_ROOTS) {
    snprintf(err, errlen, "%sdata_root: more than %d data roots", where, CFG_MAX_ROOTS);
    return -1;
  }
  // Stored resolved: spec paths are compared after realpath too.
  char *r = realpath(v, NULL);
  if (!r) {
    snprintf(err, errlen, "%sdata_root: %s: %s", where, v, strerror(errno));
    return -1;
  }
  c->roots[c->n_roots++] = r;
  return 0;
}

static int apply(cfg *c, const char *key, const char *v, char *err, size_t errlen, const char *where) {
  int64_t x;
#define INT_KEY(name, lo, hi, suffix, field)                                                             \
  if (!strcmp(key, name)) {                                                                          \
    if (parse_int(v, lo, hi, suffix, &x)) {                                                          \
      snprintf(err, errlen, "%s%s: \"%s\" is not an integer in [%lld, %lld]", where, name, v,        \
               (long long)(lo), (long long)(hi));                                                    \
      return -1;                                                                                     \
    }                                                                                                \
    c->field = x;                                                                                    \
    return 0;                                                                                        \
  }
  INT_KEY("max_message_bytes", 4096, 64 << 20, 1, max_message_bytes)
  INT_KEY("max_connections", 1, 1 << 20, 0, max_connections)
  INT_KEY("max_streams", 1, 1 << 16, 0, max_streams)
  INT_KEY("retention_jobs", 0, INT_MAX, 0, retention_jobs)
  INT_KEY("retention_age_s", 0, INT64_MAX / 2, 0, retention_age_s)
  INT_KEY("drain_timeout_s", 1, 3600, 0, drain_timeout_s)
  INT_KEY("checkpoint_every", 1, INT_MAX, 0, checkpoint_every)
  INT_KEY("checkpoint_keep", 1, 1000, 0, checkpoint_keep)
  INT_KEY("cpu_memory_bytes", 1 << 20, INT64_C(1) << 50, 1, cpu_memory_bytes)
  INT_KEY("metrics_interval_ms", 0, 3600000, 0, metrics_interval_ms)
  INT_KEY("host_memory_bytes", 0, INT64_C(1) << 50, 1, host_memory_bytes)
  INT_KEY("max_crashes", 1, 1000, 0, max_crashes)
  INT_KEY("max_queued_jobs", 1, 10000000, 0, max_queued_jobs)
  INT_KEY("runner_nice", 0, 19, 0, runner_nice)
  INT_KEY("runner_idle", 0, 1, 0, runner_idle)
#undef INT_KEY
  if (!strcmp(key, "socket_mode")) {
    char *end;
    unsigned long m = strtoul(v, &end, 8);
    if (*end || end == v || m > 0777) {
      snprintf(err, errlen, "%ssocket_mode: \"%s\" is not an octal mode like 0660", where, v);
      return -1;
    }
    c->socket_mode = (unsigned)m;
    return 0;
  }
  if (!strcmp(key, "log_level")) {
    if ((c->log_level = log_level_parse(v)) < 0) {
      snprintf(err, errlen, "%slog_level: \"%s\" is not one of error, warning, info, debug", where, v);
      return -1;
    }
    return 0;
  }
  if (!strcmp(key, "data_root")) return add_root(c, v, err, errlen, where);
  char **str = !strcmp(key, "state_dir")     ? &c->state_dir
               : !strcmp(key, "socket")      ? &c->socket_path
               : !strcmp(key, "tcp")         ? &c->tcp
               : !strcmp(key, "tls_cert")    ? &c->tls_cert
               : !strcmp(key, "tls_key")     ? &c->tls_key
               : !strcmp(key, "token_file")  ? &c->token_file
               : !strcmp(key, "profile_file") ? &c->profile_file
               : !strcmp(key, "profile_override") ? &c->profile_override
               : !strcmp(key, "admin_group") ? &c->admin_group
               : !strcmp(key, "metrics_listen") ? &c->metrics_listen
                                             : NULL;
  if (!str) {
    snprintf(err, errlen, "%s%s: unknown key", where, key);
    return -1;
  }
  set_str(str, v);
  return 0;
}

int cfg_set(cfg *c, const char *key, const char *value, char *err, size_t errlen) {
  return apply(c, key, value, err, errlen, "");
}

static int load_file(cfg *c, const char *path, char *err, size_t errlen) {
  // A directory opens and reads as nothing (glibc's fopen succeeds on one):
  // it would pass for an empty config that refuses every job. (A FIFO would
  // block the loop.)
  struct stat st;
  if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
    snprintf(err, errlen, "%s: not a regular file%s", path, S_ISDIR(st.st_mode) ? " (a directory)" : "");
    return -1;
  }
  FILE *f = fopen(path, "r");
  if (!f) {
    snprintf(err, errlen, "%s: %s", path, strerror(errno));
    return -1;
  }
  char line[4096], where[4200];
  int lineno = 0, rc = 0;
  while (!rc && fgets(line, sizeof line, f)) {
    lineno++;
    snprintf(where, sizeof where, "%s:%d: ", path, lineno);
    if (!strchr(line, '\n') && !feof(f)) {
      snprintf(err, errlen, "%sline longer than %zu bytes", where, sizeof line - 2);
      rc = -1;
      break;
    }
    char *hash = strchr(line, '#');
    if (hash) *hash = 0;
    char *s = trim(line);
    if (!*s) continue;
    char *eq = strchr(s, '=');
    if (!eq) {
      snprintf(err, errlen, "%sexpected `key = value`", where);
      rc = -1;
      break;
    }
    *eq = 0;
    rc = apply(c, trim(s), trim(eq + 1), err, errlen, where);
  }
  fclose(f);
  return rc;
}

static int finish(cfg *c, char *err, size_t errlen) {
  if (!c->state_dir) {
    const char *sd = getenv("STATE_DIRECTORY"); // systemd's StateDirectory=
    set_str(&c->state_dir, sd && *sd ? sd : "/var/lib/traind");
    // With several StateDirectory= entries systemd joins them with ':'.
    char *colon = strchr(c->state_dir, ':');
    if (colon) *colon = 0;
  }
  if (!c->socket_path) {
    const char *rd = getenv("RUNTIME_DIRECTORY");
    char buf[4200];
    snprintf(buf, sizeof buf, "%s/traind.sock", rd && *rd ? rd : c->state_dir);
    char *colon = rd && *rd ? strchr(buf, ':') : NULL;
    if (colon) snprintf(colon, sizeof buf - (size_t)(colon - buf), "/traind.sock");
    set_str(&c->socket_path, buf);
  }
  if (c->tcp && (!c->tls_cert || !c->tls_key || !c->token_file)) {
    snprintf(err, errlen, "tcp: listening on TCP needs tls_cert, tls_key and token_file");
    return -1;
  }
  return 0;
}

int cfg_load(cfg *c, const char *path, const cfg *over, char *err, size_t errlen) {
  cfg_free(c);
  c->socket_mode = 0660;
  c->max_message_bytes = 1 << 20;
  c->max_connections = 256;
  c->max_streams = 100;
  c->retention_jobs = 1000;
  c->retention_age_s = 30 * 86400;
  c->drain_timeout_s = 20;
  c->checkpoint_every = 100;
  c->checkpoint_keep = 2;
  c->cpu_memory_bytes = INT64_C(1) << 30;
  c->metrics_interval_ms = 1000;
  c->host_memory_bytes = 0;
  c->max_crashes = 3;
  c->max_queued_jobs = 10000;
  c->runner_nice = 10;
  c->runner_idle = 1;
  c->log_level = LOG_LVL_INFO;
  if (path && load_file(c, path, err, errlen)) return -1;
  if (over) {
    const char *strs[][2] = {{"state_dir", over->state_dir}, {"socket", over->socket_path}, {"tcp", over->tcp},
                             {"tls_cert", over->tls_cert},   {"tls_key", over->tls_key},     {"token_file", over->token_file},
                             {"profile_file", over->profile_file}, {"profile_override", over->profile_override},
                             {"admin_group", over->admin_group}, {"metrics_listen", over->metrics_listen}};
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
      if (strs[i][1]) apply(c, strs[i][0], strs[i][1], err, errlen, "");
    if (over->n_roots > 0) {
      for (int i = 0; i < c->n_roots; i++) free(c->roots[i]);
      c->n_roots = 0;
      for (int i = 0; i < over->n_roots; i++)
        if (add_root(c, over->roots[i], err, errlen, "--")) return -1;
    }
    if (over->socket_mode != UINT32_MAX) c->socket_mode = over->socket_mode;
#define NUM(f)                                                                                       \
  if (over->f >= 0) c->f = over->f;
    NUM(max_message_bytes) NUM(max_connections) NUM(max_streams) NUM(retention_jobs) NUM(retention_age_s)
    NUM(drain_timeout_s) NUM(checkpoint_every) NUM(checkpoint_keep) NUM(cpu_memory_bytes) NUM(metrics_interval_ms)
    NUM(log_level) NUM(host_memory_bytes) NUM(max_crashes) NUM(max_queued_jobs) NUM(runner_nice)
    NUM(runner_idle)
#undef NUM
  }
  return finish(c, err, errlen);
}
