#include "metrics.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

enum { MAX_HEADER = 8192, MAX_CONNS = 16 };

typedef struct conn {
  uv_tcp_t tcp;
  struct metrics *m;
  char buf[MAX_HEADER];
  size_t len;
  uv_write_t wr;
  char *out;
  struct conn *next, *prev;
} conn;

struct metrics {
  traind *d;
  uv_tcp_t listener;
  conn *conns;
  int n_conns;
  int stopping;
  int open_handles; // the listener and the connections not yet closed
};

// ---- rendering -------------------------------------------------------------

typedef struct buf {
  char *p;
  size_t n, cap;
  int oom;
} buf;

static void put(buf *b, const char *fmt, ...) {
  if (b->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
    va_end(ap);
    if (k >= 0 && (size_t)k < b->cap - b->n) {
      b->n += (size_t)k;
      return;
    }
    size_t cap = b->cap * 2 + (size_t)(k > 0 ? k : 0) + 4096;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->oom = 1;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
}

// A label value: backslash, quote and newline escaped.
static void label(buf *b, const char *v) {
  for (; *v; v++) {
    if (*v == '\\') put(b, "\\\\");
    else if (*v == '"') put(b, "\\\"");
    else if (*v == '\n') put(b, "\\n");
    else put(b, "%c", *v);
  }
}

static int live(const job *j) {
  return j->state == JS(QUEUED) || j->state == JS(RUNNING) || j->state == JS(CANCELLING);
}

// One metric family over every unfinished job: `value` picks the number
// (NAN: the job has none yet, no sample); extra is a label pair or "".
typedef double (*job_value)(const job *j, int k);
static void family(buf *b, const traind *d, const char *name, const char *type, const char *help, job_value value,
                   const char *key, const char *const *keys, int n_keys) {
  put(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
  for (size_t i = 0; i < d->n_all; i++) {
    const job *j = d->all[i];
    if (!live(j)) continue;
    for (int k = 0; k < (n_keys ? n_keys : 1); k++) {
      double v = value(j, k);
      if (isnan(v)) continue;
      put(b, "%s{job=\"%s\",name=\"", name, j->id);
      label(b, j->spec->name);
      put(b, "\"");
      if (n_keys) put(b, ",%s=\"%s\"", key, keys[k]);
      put(b, "} %.17g\n", v);
    }
  }
}

static double v_step(const job *j, int k) { return (void)k, (double)j->progress.step; }
static double v_loss(const job *j, int k) { return (void)k, j->progress.step > 0 ? j->progress.loss : NAN; }
static double v_eval(const job *j, int k) { return (void)k, j->progress.eval_loss; }
static double v_tps(const job *j, int k) { return (void)k, j->progress.step > 0 ? j->progress.tokens_per_s : NAN; }
static double v_eta(const job *j, int k) { return (void)k, j->progress.eta_s > 0 ? j->progress.eta_s : NAN; }
static double v_mfu(const job *j, int k) { return (void)k, j->compute ? j->compute->mfu : NAN; }
static double v_flops(const job *j, int k) { return (void)k, j->compute ? j->compute->model_flops : 0; }
static double v_xflops(const job *j, int k) { return (void)k, j->compute ? j->compute->executed_flops : 0; }
static double v_tokens(const job *j, int k) { return (void)k, j->compute ? (double)j->compute->tokens : 0; }
static double v_wall(const job *j, int k) { return (void)k, j->compute ? j->compute->wall_seconds : 0; }

static const char *const phases[] = {"forward", "loss", "backward", "optimizer_wait", "total"};
static double v_phase(const job *j, int k) {
  if (j->progress.step <= 0) return NAN;
  const Traind__V1__Phases *p = &j->phases;
  const double v[] = {p->forward, p->loss, p->backward, p->optimizer_wait, p->total};
  return v[k];
}

// What is left of each limit the job has, as a fraction of it: its steps,
// and the spec's budgets.
static const char *const budgets[] = {"steps", "max_tokens", "max_flops", "max_wall_seconds"};
static double v_budget(const job *j, int k) {
  const Traind__V1__BudgetSpec *b = j->spec->budget;
  const Traind__V1__Compute *c = j->compute;
  double spent, limit;
  switch (k) {
  case 0: spent = (double)j->progress.step, limit = (double)j->progress.total_steps; break;
  case 1: spent = c ? (double)c->tokens : 0, limit = b ? (double)b->max_tokens : 0; break;
  case 2: spent = c ? c->model_flops : 0, limit = b ? b->max_flops : 0; break;
  default: spent = c ? c->wall_seconds : 0, limit = b ? b->max_wall_seconds : 0; break;
  }
  return limit > 0 ? fmax(0.0, 1.0 - spent / limit) : NAN;
}

char *metrics_render(const traind *d, size_t *n) {
  buf b = {0};
  put(&b, "# HELP traind_queue_depth Jobs waiting for the device.\n# TYPE traind_queue_depth gauge\n");
  put(&b, "traind_queue_depth %d\n", d->n_queued);
  static const job_state states[] = {JS(QUEUED), JS(RUNNING), JS(SUCCEEDED), JS(FAILED), JS(CANCELLED), JS(CANCELLING)};
  static const char *const state_names[] = {"queued", "running", "succeeded", "failed", "cancelled", "cancelling"};
  size_t count[6] = {0};
  for (size_t i = 0; i < d->n_all; i++)
    for (int s = 0; s < 6; s++) count[s] += d->all[i]->state == states[s];
  put(&b, "# HELP traind_jobs Jobs the daemon keeps, by state.\n# TYPE traind_jobs gauge\n");
  for (int s = 0; s < 6; s++) put(&b, "traind_jobs{state=\"%s\"} %zu\n", state_names[s], count[s]);
  family(&b, d, "traind_job_step", "gauge", "Optimizer steps done.", v_step, NULL, NULL, 0);
  family(&b, d, "traind_job_loss", "gauge", "Training loss of the last step.", v_loss, NULL, NULL, 0);
  family(&b, d, "traind_job_eval_loss", "gauge", "Held-out loss of the last evaluation.", v_eval, NULL, NULL, 0);
  family(&b, d, "traind_job_tokens_per_second", "gauge", "Tokens per second of the last step.", v_tps, NULL, NULL, 0);
  family(&b, d, "traind_job_mfu", "gauge", "Model FLOPs utilisation of the last step (model FLOPs / time / peak).",
         v_mfu, NULL, NULL, 0);
  family(&b, d, "traind_job_model_flops_total", "counter",
         "Model FLOPs spent (6N per token plus attention, PaLM's convention), over resumes.", v_flops, NULL, NULL, 0);
  family(&b, d, "traind_job_executed_flops_total", "counter", "FLOPs the engine executed, recompute included.",
         v_xflops, NULL, NULL, 0);
  family(&b, d, "traind_job_tokens_total", "counter", "Tokens trained on, over resumes.", v_tokens, NULL, NULL, 0);
  family(&b, d, "traind_job_wall_seconds_total", "counter", "Seconds spent training, over resumes.", v_wall, NULL,
         NULL, 0);
  family(&b, d, "traind_job_budget_remaining_ratio", "gauge", "Fraction of each limit the job has left.", v_budget,
         "budget", budgets, 4);
  family(&b, d, "traind_job_phase_seconds", "gauge", "Seconds of each phase of the last step.", v_phase, "phase",
         phases, 5);
  family(&b, d, "traind_job_eta_seconds", "gauge", "Seconds until the job's last step, at its recent rate.", v_eta,
         NULL, NULL, 0);
  if (b.oom) {
    free(b.p);
    return NULL;
  }
  *n = b.n;
  return b.p;
}

// ---- HTTP --------------------------------------------------------------------

static void on_handle_closed(uv_handle_t *h) {
  metrics *m = h->data;
  if (h != (uv_handle_t *)&m->listener) {
    conn *c = (conn *)h;
    free(c->out);
    free(c);
  }
  if (--m->open_handles == 0 && m->stopping) free(m);
}

static void conn_close(conn *c) {
  metrics *m = c->m;
  if (uv_is_closing((uv_handle_t *)&c->tcp)) return;
  if (c->prev) c->prev->next = c->next;
  else m->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  m->n_conns--;
  uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
}

static void on_written(uv_write_t *w, int status) {
  (void)status;
  conn_close(w->data);
}

static void respond(conn *c, const char *status, const char *type, const char *body, size_t n) {
  char head[256];
  int h = snprintf(head, sizeof head, "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                   status, type, n);
  if (!(c->out = malloc((size_t)h + n))) {
    conn_close(c);
    return;
  }
  memcpy(c->out, head, (size_t)h);
  memcpy(c->out + h, body, n);
  uv_buf_t b = uv_buf_init(c->out, (unsigned)((size_t)h + n));
  c->wr.data = c;
  uv_read_stop((uv_stream_t *)&c->tcp);
  if (uv_write(&c->wr, (uv_stream_t *)&c->tcp, &b, 1, on_written)) conn_close(c);
}

static void answer(conn *c) {
  static const char text[] = "text/plain; charset=utf-8";
  char method[16], path[256];
  if (sscanf(c->buf, "%15s %255s", method, path) != 2) {
    respond(c, "400 Bad Request", text, "a request line, please\n", 23);
  } else if (strcmp(method, "GET")) {
    respond(c, "405 Method Not Allowed", text, "GET /metrics\n", 13);
  } else if (strcmp(path, "/metrics")) {
    respond(c, "404 Not Found", text, "the metrics are at /metrics\n", 28);
  } else {
    size_t n;
    char *body = metrics_render(c->m->d, &n);
    if (!body) {
      respond(c, "500 Internal Server Error", text, "out of memory\n", 14);
      return;
    }
    respond(c, "200 OK", "text/plain; version=0.0.4; charset=utf-8", body, n);
    free(body);
  }
}

static void on_alloc(uv_handle_t *h, size_t want, uv_buf_t *b) {
  (void)want;
  conn *c = (conn *)h;
  *b = uv_buf_init(c->buf + c->len, (unsigned)(sizeof c->buf - 1 - c->len));
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b) {
  (void)b;
  conn *c = (conn *)s;
  if (nread < 0) {
    conn_close(c);
    return;
  }
  c->len += (size_t)nread;
  c->buf[c->len] = 0;
  if (strstr(c->buf, "\r\n\r\n") || strstr(c->buf, "\n\n")) answer(c);
  else if (c->len >= sizeof c->buf - 1) respond(c, "431 Request Header Fields Too Large", "text/plain", "", 0);
}

static void on_connection(uv_stream_t *l, int status) {
  metrics *m = l->data;
  if (status < 0 || m->stopping) return;
  conn *c = calloc(1, sizeof *c);
  if (!c) return;
  c->m = m;
  uv_tcp_init(l->loop, &c->tcp);
  c->tcp.data = m;
  m->open_handles++;
  if (uv_accept(l, (uv_stream_t *)&c->tcp) || m->n_conns >= MAX_CONNS) {
    uv_close((uv_handle_t *)&c->tcp, on_handle_closed); // also when at the limit: the client retries
    return;
  }
  c->next = m->conns;
  if (m->conns) m->conns->prev = c;
  m->conns = c;
  m->n_conns++;
  if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read)) conn_close(c);
}

int metrics_start(metrics **out, traind *d, const char *addr, char *err, size_t errlen) {
  char host[256];
  int port;
  struct sockaddr_storage sa;
  int rc;
  const char *colon = strrchr(addr, ':');
  if (!colon || sscanf(colon + 1, "%d", &port) != 1 || port < 1 || port > 65535 || (size_t)(colon - addr) >= sizeof host) {
    snprintf(err, errlen, "metrics_listen: \"%s\" is not host:port", addr);
    return -1;
  }
  snprintf(host, sizeof host, "%.*s", (int)(colon - addr), addr);
  if (host[0] == '[' && host[strlen(host) - 1] == ']') { // [::1]:port
    memmove(host, host + 1, strlen(host));
    host[strlen(host) - 1] = 0;
    rc = uv_ip6_addr(host, port, (struct sockaddr_in6 *)&sa);
  } else {
    rc = uv_ip4_addr(host, port, (struct sockaddr_in *)&sa);
  }
  if (rc) {
    snprintf(err, errlen, "metrics_listen: \"%s\" is not an IP address (%s)", host, uv_strerror(rc));
    return -1;
  }
  metrics *m = calloc(1, sizeof *m);
  if (!m) {
    snprintf(err, errlen, "metrics_listen: out of memory");
    return -1;
  }
  m->d = d;
  uv_tcp_init(d->loop, &m->listener);
  m->listener.data = m;
  m->open_handles = 1;
  if ((rc = uv_tcp_bind(&m->listener, (const struct sockaddr *)&sa, 0)) ||
      (rc = uv_listen((uv_stream_t *)&m->listener, 16, on_connection))) {
    snprintf(err, errlen, "metrics_listen: cannot listen on %s: %s", addr, uv_strerror(rc));
    m->stopping = 1;
    uv_close((uv_handle_t *)&m->listener, on_handle_closed);
    return -1;
  }
  *out = m;
  return 0;
}

void metrics_stop(metrics *m) {
  if (!m) return;
  m->stopping = 1;
  while (m->conns) conn_close(m->conns);
  uv_close((uv_handle_t *)&m->listener, on_handle_closed);
}
