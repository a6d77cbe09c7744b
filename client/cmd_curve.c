// trainctl curve JOB: the job's loss curve as an SVG on stdout. Two panels:
// training and held-out loss against tokens, and against model FLOPs on a
// log axis, where the marginal-gain rule's last fit (loss = a + b·ln F,
// DESIGN §8) is a straight line, drawn over the evaluations it spans and
// a little beyond. Training losses come from the job's step events (one per
// metrics_interval_ms and every evaluation), held-out ones from its record.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "trainctl.h"

#define K(x) TRAIND__V1__##x

typedef struct pt {
  double tokens, flops, loss;
} pt;

typedef struct series {
  pt *p;
  size_t n, cap;
} series;

static int add(series *s, pt p) {
  if (s->n == s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 256;
    pt *q = realloc(s->p, cap * sizeof *q);
    if (!q) return -1;
    s->p = q;
    s->cap = cap;
  }
  s->p[s->n++] = p;
  return 0;
}

// The training losses of the job's step events, in order (a step a resume
// redid replaces the points after it).
static int train_points(ctl *c, rpc *r, const char *job, series *s) {
  Traind__V1__WatchJobRequest req = K(WATCH_JOB_REQUEST__INIT);
  req.job_id = (char *)job;
  req.no_follow = 1;
  rpc_stream *st;
  rpc_status status;
  if (rpc_stream_open(r, "/traind.v1.Trainer/WatchJob", &req.base, 0, &st, &status)) return ctl_fail("curve", &status);
  ProtobufCMessage *m;
  int rc = 0;
  while (!rc && rpc_stream_next(st, &traind__v1__job_event__descriptor, &m, &status) == 1) {
    const Traind__V1__JobEvent *ev = (const Traind__V1__JobEvent *)m;
    if (ev->kind_case == K(JOB_EVENT__KIND_STEP) && ev->step->total_tokens > 0 && isfinite(ev->step->loss)) {
      const Traind__V1__StepMetrics *sm = ev->step;
      while (s->n && s->p[s->n - 1].tokens >= (double)sm->total_tokens) s->n--;
      if (add(s, (pt){(double)sm->total_tokens, sm->total_model_flops, sm->loss})) rc = EXIT_UNREACHABLE;
    }
    protobuf_c_message_free_unpacked(m, NULL);
  }
  rpc_stream_close(st);
  if (!rc && status.code != GRPC_STATUS_OK) rc = ctl_fail("curve", &status);
  (void)c;
  return rc;
}

// ---- drawing ----------------------------------------------------------------

enum { W = 1040, H = 500, PW = 420, PH = 330, TOP = 70, LEFT0 = 70, LEFT1 = 570 };

typedef struct axis {
  double lo, hi;
  int log;
} axis;

static double pos(const axis *a, double v, double len) {
  double x = a->log ? log10(v) : v, lo = a->log ? log10(a->lo) : a->lo, hi = a->log ? log10(a->hi) : a->hi;
  return hi > lo ? (x - lo) / (hi - lo) * len : len / 2;
}

static void fmt_num(double v, char *buf, size_t n) {
  if (fabs(v) >= 1e4 || (fabs(v) < 1e-2 && v != 0)) snprintf(buf, n, "%.2g", v);
  else snprintf(buf, n, "%.3g", v);
}

// A panel's frame, ticks and labels at (x0, TOP).
static void frame(int x0, const axis *ax, const axis *ay, const char *xlabel) {
  printf("<rect x='%d' y='%d' width='%d' height='%d' fill='none' stroke='#444'/>\n", x0, TOP, PW, PH);
  char b[32];
  for (int i = 0; i <= 4; i++) {
    double v = ax->log ? pow(10, log10(ax->lo) + (log10(ax->hi) - log10(ax->lo)) * i / 4)
                       : ax->lo + (ax->hi - ax->lo) * i / 4;
    double x = x0 + pos(ax, v, PW);
    fmt_num(v, b, sizeof b);
    printf("<line x1='%.1f' y1='%d' x2='%.1f' y2='%d' stroke='#ddd'/>\n", x, TOP, x, TOP + PH);
    printf("<text x='%.1f' y='%d' font-size='11' text-anchor='middle'>%s</text>\n", x, TOP + PH + 16, b);
    double y = ay->lo + (ay->hi - ay->lo) * i / 4, yy = TOP + PH - pos(ay, y, PH);
    fmt_num(y, b, sizeof b);
    printf("<line x1='%d' y1='%.1f' x2='%d' y2='%.1f' stroke='#ddd'/>\n", x0, yy, x0 + PW, yy);
    printf("<text x='%d' y='%.1f' font-size='11' text-anchor='end'>%s</text>\n", x0 - 5, yy + 4, b);
  }
  printf("<text x='%d' y='%d' font-size='12' text-anchor='middle'>%s</text>\n", x0 + PW / 2, TOP + PH + 34, xlabel);
  printf("<text x='%d' y='%d' font-size='12' text-anchor='middle' transform='rotate(-90 %d %d)'>loss</text>\n",
         x0 - 48, TOP + PH / 2, x0 - 48, TOP + PH / 2);
}

// One series as a polyline (and dots when few), x from tokens (by = 0) or FLOPs.
static void line(int x0, const axis *ax, const axis *ay, const series *s, int by, const char *color, int dots) {
  if (!s->n) return;
  printf("<polyline fill='none' stroke='%s' stroke-width='1.5' points='", color);
  for (size_t i = 0; i < s->n; i++) {
    double xv = by ? s->p[i].flops : s->p[i].tokens;
    if (ax->log && !(xv > 0)) continue;
    printf("%.1f,%.1f ", x0 + pos(ax, xv, PW), TOP + PH - pos(ay, s->p[i].loss, PH));
  }
  printf("'/>\n");
  for (size_t i = 0; dots && i < s->n; i++) {
    double xv = by ? s->p[i].flops : s->p[i].tokens;
    if (ax->log && !(xv > 0)) continue;
    printf("<circle cx='%.1f' cy='%.1f' r='3' fill='%s'/>\n", x0 + pos(ax, xv, PW), TOP + PH - pos(ay, s->p[i].loss, PH),
           color);
  }
}

static void draw(const Traind__V1__Job *j, const series *train, const series *eval) {
  const Traind__V1__Compute *c = j->compute;
  axis tok = {INFINITY, -INFINITY, 0}, fl = {INFINITY, -INFINITY, 1}, ay = {INFINITY, -INFINITY, 0};
  const series *all[2] = {train, eval};
  for (int k = 0; k < 2; k++)
    for (size_t i = 0; i < all[k]->n; i++) {
      const pt *p = &all[k]->p[i];
      tok.lo = fmin(tok.lo, p->tokens), tok.hi = fmax(tok.hi, p->tokens);
      if (p->flops > 0) fl.lo = fmin(fl.lo, p->flops), fl.hi = fmax(fl.hi, p->flops);
      ay.lo = fmin(ay.lo, p->loss), ay.hi = fmax(ay.hi, p->loss);
    }
  // The fit spans its window of evaluations and a quarter of the run's
  // FLOPs beyond the last (what it predicted the rest would buy).
  int fit = c && isfinite(c->fit_a) && isfinite(c->fit_b) && c->n_evals >= 3;
  double f0 = 0, f1 = 0;
  if (fit) {
    size_t w = j->spec->budget && j->spec->budget->gain_window ? (size_t)j->spec->budget->gain_window : 4;
    f0 = c->evals[c->n_evals > w ? c->n_evals - w : 0]->model_flops;
    f1 = c->evals[c->n_evals - 1]->model_flops * 1.25;
    fl.hi = fmax(fl.hi, f1);
    ay.lo = fmin(ay.lo, c->fit_a + c->fit_b * log(f1));
  }
  double pad = (ay.hi - ay.lo) * 0.05 + 1e-6;
  ay.lo = ay.lo >= 0 ? fmax(0, ay.lo - pad) : ay.lo - pad; // a loss is never negative
  ay.hi += pad;
  tok.lo = 0;
  if (!(fl.lo < fl.hi)) fl.lo = fl.hi / 10;
  printf("<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%d' font-family='sans-serif'>\n", W, H);
  printf("<rect width='100%%' height='100%%' fill='white'/>\n");
  printf("<text x='%d' y='24' font-size='15'>job %s%s%s: loss against tokens and model FLOPs</text>\n", LEFT0, j->id,
         j->spec && *j->spec->name ? " " : "", j->spec ? j->spec->name : "");
  if (c && *c->stop_reason)
    printf("<text x='%d' y='44' font-size='12' fill='#b00'>stopped by %s after %lld tokens, %.3g FLOPs</text>\n",
           LEFT0, c->stop_reason, (long long)c->tokens, c->model_flops);
  frame(LEFT0, &tok, &ay, "tokens");
  frame(LEFT1, &fl, &ay, "model FLOPs (log)");
  line(LEFT0, &tok, &ay, train, 0, "#1f77b4", 0);
  line(LEFT0, &tok, &ay, eval, 0, "#ff7f0e", 1);
  line(LEFT1, &fl, &ay, train, 1, "#1f77b4", 0);
  line(LEFT1, &fl, &ay, eval, 1, "#ff7f0e", 1);
  if (fit) {
    printf("<polyline fill='none' stroke='#d62728' stroke-width='2' stroke-dasharray='6,4' points='");
    for (int i = 0; i <= 20; i++) {
      double f = exp(log(f0) + (log(f1) - log(f0)) * i / 20);
      printf("%.1f,%.1f ", LEFT1 + pos(&fl, f, PW), TOP + PH - pos(&ay, c->fit_a + c->fit_b * log(f), PH));
    }
    printf("'/>\n");
  }
  int ly = H - 20;
  printf("<line x1='%d' y1='%d' x2='%d' y2='%d' stroke='#1f77b4' stroke-width='2'/><text x='%d' y='%d' "
         "font-size='12'>training loss</text>\n", LEFT0, ly - 4, LEFT0 + 24, ly - 4, LEFT0 + 30, ly);
  printf("<line x1='%d' y1='%d' x2='%d' y2='%d' stroke='#ff7f0e' stroke-width='2'/><text x='%d' y='%d' "
         "font-size='12'>held-out loss</text>\n", LEFT0 + 150, ly - 4, LEFT0 + 174, ly - 4, LEFT0 + 180, ly);
  if (fit)
    printf("<line x1='%d' y1='%d' x2='%d' y2='%d' stroke='#d62728' stroke-width='2' stroke-dasharray='6,4'/>"
           "<text x='%d' y='%d' font-size='12'>marginal-gain fit: %.4f %+.4f ln F (gain %.3g per FLOP)</text>\n",
           LEFT0 + 300, ly - 4, LEFT0 + 324, ly - 4, LEFT0 + 330, ly, c->fit_a, c->fit_b, c->gain);
  printf("</svg>\n");
}

int cmd_curve(ctl *c, int argc, char **argv) {
  struct option *opts = ctl_opts(NULL);
  int opt, bad = 0;
  while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1)
    if (!ctl_global(c, opt, optarg)) bad = 1;
  free(opts);
  if (bad || optind != argc - 1) {
    if (!bad) fprintf(stderr, "trainctl curve: expected one job id\n");
    return EXIT_USAGE;
  }
  const char *job = argv[optind];
  rpc *r = ctl_rpc(c);
  if (!r) return EXIT_UNREACHABLE;
  Traind__V1__Job *j;
  rpc_status st;
  if (ctl_get_job(c, r, job, &j, &st)) return ctl_fail("curve", &st);
  series train = {0}, eval = {0};
  int rc = train_points(c, r, job, &train);
  for (size_t i = 0; !rc && j->compute && i < j->compute->n_evals; i++) {
    const Traind__V1__EvalPoint *e = j->compute->evals[i];
    if (isfinite(e->loss) && add(&eval, (pt){(double)e->tokens, e->model_flops, e->loss})) rc = EXIT_UNREACHABLE;
  }
  if (!rc && !train.n && !eval.n) {
    fprintf(stderr, "trainctl curve: job %s has no step with its compute recorded yet\n", job);
    rc = EXIT_REFUSED;
  }
  if (!rc) draw(j, &train, &eval);
  free(train.p);
  free(eval.p);
  protobuf_c_message_free_unpacked(&j->base, NULL);
  return rc;
}
