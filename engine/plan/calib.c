// Calibration of the cpu backend (plan/profile.h): the rates the cost model
// needs, measured with the engine's own kernels at the job's shapes.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "kernels/cpu/gemm.h"
#include "kernels/kernels.h"
#include "optim/adamw.h"
#include "plan/profile.h"
#include "poet/poet.h"
#include "poet/state.h"


// Runs fn until `secs` have passed (at least twice: the first run warms the
// caches and the thread pool and is not counted); returns seconds per run.
typedef void (*op_fn)(void *ctx);
static double time_op(op_fn fn, void *ctx, double secs) {
  fn(ctx);
  int runs = 0;
  double t0 = eng_now(), t;
  do {
    fn(ctx);
    runs++;
    t = eng_now();
  } while (t - t0 < secs);
  return (t - t0) / runs;
}

static void fill(float *x, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    x[i] = (float)((seed >> 9) & 0xffff) / 65536.0f - 0.5f;
  }
}

typedef struct lin {
  float *x, *w, *y, *dx, *dw;
  int n, in, out;
} lin;

static void lin_fwd(void *c) {
  lin *l = c;
  eng_k_linear_fwd(l->y, l->x, l->w, NULL, l->n, l->in, l->out);
}

static void lin_bwd(void *c) {
  lin *l = c;
  eng_k_linear_bwd(l->dx, l->dw, NULL, l->y, l->x, l->w, l->n, l->in, l->out, 0);
}

typedef struct att {
  float *q, *k, *v, *o, *lse, *dq, *dk, *dv;
  int B, T, H, KV, hd;
} att;

static void att_fwd(void *c) {
  att *a = c;
  int qs = a->H * a->hd, ks = a->KV * a->hd;
  eng_k_attention_fwd(a->o, a->lse, a->q, qs, a->k, ks, a->v, ks, NULL, a->B, a->T, a->H, a->KV, a->hd, 0);
}

static void att_bwd(void *c) {
  att *a = c;
  int qs = a->H * a->hd, ks = a->KV * a->hd;
  eng_k_attention_bwd(a->dq, a->dk, a->dv, a->o, a->o, a->lse, a->q, qs, a->k, ks, a->v, ks, NULL, a->B, a->T, a->H,
                      a->KV, a->hd, 0);
}

typedef struct elem {
  float *x, *y, *w, *rstd, *gu, *h;
  int n, d, ff;
  size_t nf;
  float eps;
} elem;

static void elem_run(void *c) {
  elem *e = c;
  eng_k_rmsnorm_fwd(e->y, e->rstd, e->x, e->w, e->n, e->d, e->eps);
  eng_k_swiglu_fwd(e->h, e->gu, e->n, e->ff);
}

typedef struct cpy {
  char *a, *b;
  size_t n;
} cpy;

static void cpy_run(void *c) {
  cpy *x = c;
  memcpy(x->b, x->a, x->n);
}

typedef struct opt {
  float *w, *g, *m, *v;
  size_t n;
} opt;

static void opt_run(void *c) {
  opt *o = c;
  eng_adamw_update(o->w, o->g, o->m, o->v, o->n, 1e-4f, 0.1f, 0.9f, 0.95f, 1e-8f, 1.0f, 2);
}

// One side of a POET-X weight: the gather by its permutation, then the
// block rotation (poet/poet.h), over n rows of dim values.
typedef struct rot {
  float *x, *u, *y, *R, *panels;
  int32_t *perm;
  int n, dim, b;
} rot;

static void rot_run(void *c) {
  rot *r = c;
  eng_poet_gather(r->n, r->dim, r->perm, r->x, r->dim, r->u, r->dim, 0);
  eng_k_sgemm_bdiag(r->n, r->dim, r->b, r->u, r->dim, r->R, 0, r->y, r->dim, r->panels);
}

// POET-X's rotation rate at block size b over n rows of the widest
// multiple of b up to dim values; 0 when b is 0 or wider than dim, or the
// buffers cannot be had.
static double rot_rate(int n, int dim, int b, double secs) {
  if (b <= 0 || dim < b) return 0;
  dim -= dim % b;
  size_t nd = (size_t)n * dim;
  rot r = {malloc(nd * 4), malloc(nd * 4), malloc(nd * 4), malloc((size_t)dim * b * 4),
           malloc(eng_k_bdiag_work(dim, b) * 4), malloc((size_t)dim * sizeof(int32_t)), n, dim, b};
  double flops = 0;
  if (r.x && r.u && r.y && r.R && r.panels && r.perm) {
    for (int i = 0; i < dim; i++) r.perm[i] = (int32_t)(((size_t)i * 7919) % (size_t)dim); // scattered
    if (!eng_poet_is_perm(r.perm, (size_t)dim))
      for (int i = 0; i < dim; i++) r.perm[i] = dim - 1 - i;
    fill(r.x, nd, 12), fill(r.R, (size_t)dim * b, 13);
    flops = 2.0 * n * dim * b / time_op(rot_run, &r, secs);
  }
  free(r.x), free(r.u), free(r.y), free(r.R), free(r.panels), free(r.perm);
  return flops;
}

// Largest rows/dims measured: the rate of a GEMM or a pass over memory
// settles well below these, and calibration must fit in memory and in time.
enum { MAX_ROWS = 2048, MAX_DIM = 4096, MAX_HEADS = 8 };

int eng_profile_calibrate_cpu(const eng_config *c, int mb, int T, double device_cap, double max_seconds,
                              eng_profile *p, eng_err *e) {
  int rc = eng_config_validate(c, "calibration", e);
  if (rc) return rc;
  if (mb < 1 || T < 1 || !(device_cap > 0) || !(max_seconds > 0))
    return eng_err_set(e, ENG_EINVAL, "calibration: micro-batch %d, sequence %d, device cap %.0f, %g s", mb, T,
                       device_cap, max_seconds);
  // The spill tier is storage's to measure and stays as p had it; every
  // other field this does not measure (the optional caps) starts at zero.
  const double nr = p->nvme_read, nw = p->nvme_write, nb = p->nvme_bytes;
  const int pb = p->poet_block, pf = p->poet_fast, pm = p->poet_merge_every, pbf = p->poet_base_bf16;
  const int ranks = p->ranks;
  const double comm = p->comm_bps, lat = p->comm_latency;
  memset(p, 0, sizeof *p);
  p->nvme_read = nr, p->nvme_write = nw, p->nvme_bytes = nb;
  p->poet_block = pb, p->poet_fast = pf, p->poet_merge_every = pm, p->poet_base_bf16 = pbf;
  p->ranks = ranks, p->comm_bps = comm, p->comm_latency = lat; // the job's, measured by its ranks (eng_coll_rate)
  // Ten slices of measuring plus a warm-up run of each: within the budget.
  const double slice = max_seconds / 12.0;
  int n1 = mb * T < MAX_ROWS ? mb * T : MAX_ROWS, n2 = n1 / 4 > 16 ? n1 / 4 : 16;
  int in = c->d_model < MAX_DIM ? c->d_model : MAX_DIM, out = c->d_ff < MAX_DIM ? c->d_ff : MAX_DIM;
  // Attention's rate per FLOP does not depend on the head count: measure on
  // at most MAX_HEADS of them, keeping the grouping.
  int H = c->n_heads < MAX_HEADS ? c->n_heads : MAX_HEADS;
  int KV = c->n_kv_heads * H / c->n_heads > 0 ? c->n_kv_heads * H / c->n_heads : 1, hd = c->head_dim;
  while (H % KV) KV--;
  int Ta = T < MAX_ROWS ? T : MAX_ROWS;
  size_t qn = (size_t)Ta * H * hd, kn = (size_t)Ta * KV * hd;
  size_t copy_bytes = (size_t)64 << 20, opt_n = (size_t)1 << 22;
  lin l = {0};
  att a = {0};
  elem el = {0};
  cpy cp = {0};
  opt op = {0};
  l.x = malloc((size_t)n1 * in * 4), l.w = malloc((size_t)out * in * 4), l.y = malloc((size_t)n1 * out * 4);
  l.dx = malloc((size_t)n1 * in * 4), l.dw = calloc((size_t)out * in, 4);
  a.q = malloc(qn * 4), a.k = malloc(kn * 4), a.v = malloc(kn * 4), a.o = malloc(qn * 4);
  a.lse = malloc((size_t)H * Ta * 4), a.dq = malloc(qn * 4), a.dk = malloc(kn * 4), a.dv = malloc(kn * 4);
  el.nf = (size_t)n1 * out;
  el.x = malloc((size_t)n1 * in * 4), el.y = malloc((size_t)n1 * in * 4), el.w = malloc((size_t)in * 4);
  el.rstd = malloc((size_t)n1 * 4), el.gu = malloc(el.nf * 8), el.h = malloc(el.nf * 4);
  cp.a = malloc(copy_bytes), cp.b = malloc(copy_bytes);
  op.w = malloc(opt_n * 4), op.g = malloc(opt_n * 4), op.m = calloc(opt_n, 4), op.v = calloc(opt_n, 4);
  void *all[] = {l.x, l.w, l.y, l.dx, l.dw, a.q, a.k, a.v, a.o, a.lse, a.dq, a.dk, a.dv, el.x, el.y, el.w,
                 el.rstd, el.gu, el.h, cp.a, cp.b, op.w, op.g, op.m, op.v};
  int ok = 1;
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ok = ok && all[i];
  if (!ok) {
    rc = eng_err_set(e, ENG_ENOMEM, "calibration: cannot allocate the buffers of the measurements");
    goto out;
  }
  fill(l.x, (size_t)n1 * in, 1), fill(l.w, (size_t)out * in, 2);
  fill(a.q, qn, 3), fill(a.k, kn, 4), fill(a.v, kn, 5);
  fill(el.x, (size_t)n1 * in, 6), fill(el.w, (size_t)in, 7), fill(el.gu, 2 * el.nf, 8);
  memset(cp.a, 1, copy_bytes);
  fill(op.w, opt_n, 10), fill(op.g, opt_n, 11);

  // GEMMs at the job's rows and a quarter of them: the rate and how it falls
  // for short GEMMs (rate = R * rows / (rows + half)).
  l.in = in, l.out = out;
  l.n = n1;
  double r1 = 2.0 * n1 * in * out / time_op(lin_fwd, &l, slice);
  double rb = 4.0 * n1 * in * out / time_op(lin_bwd, &l, 2 * slice);
  l.n = n2;
  double r2 = 2.0 * n2 * in * out / time_op(lin_fwd, &l, slice);
  double half = fmax(0.0, (r2 - r1) / (r1 / n1 - r2 / n2)); // noise can make it negative or undefined
  if (!isfinite(half)) half = 0;
  p->gemm_half_rows = half;
  p->gemm_flops = r1 * (n1 + half) / n1;
  p->gemm_bwd_flops = rb * (n1 + half) / n1;
  p->poet_flops = rot_rate(n1, in, pb, slice);

  a.B = 1, a.T = Ta, a.H = H, a.KV = KV, a.hd = hd;
  double aflops = 2.0 * H * (double)Ta * Ta * hd; // causal, as the cost model counts it
  p->attn_flops = aflops / time_op(att_fwd, &a, slice);
  att_fwd(&a);
  p->attn_bwd_flops = 2.5 * aflops / time_op(att_bwd, &a, slice);

  el.n = n1, el.d = in, el.ff = out, el.eps = 1e-6f;
  double ebytes = 2.0 * n1 * in * 4 + 3.0 * (double)el.nf * 4;
  p->elem_bytes_per_s = ebytes / time_op(elem_run, &el, slice);

  cp.n = copy_bytes;
  p->h2d = p->d2h = (double)copy_bytes / time_op(cpy_run, &cp, slice);

  op.n = opt_n;
  p->opt_params_per_s = (double)opt_n / time_op(opt_run, &op, slice);
  p->opt_inline = 1;

  snprintf(p->name, sizeof p->name, "cpu calibrated (d %d, ff %d, %d x %d tokens)", c->d_model, c->d_ff, mb, T);
  snprintf(p->backend, sizeof p->backend, "cpu");
  p->act_bytes = 4, p->weight_bytes = 4, p->grad_bytes = 2, p->grad_store_bytes = 2;
  p->pinned_copy = 0, p->opt_8bit = 1;
  p->device_bytes = device_cap;
  p->device_reserve = 0;
  p->host_bytes = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
  p->host_reserve = fmin(p->host_bytes / 4, 4.0 * 1073741824.0); // the OS, the daemon, the page cache
out:
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
  return rc;
}
