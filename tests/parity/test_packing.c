// Packed sequences (issue 18): documents packed several to a row, their
// position ids restarting at each document (eng_exec_run's pos) and the
// label of each document's first token masked, give the loss and every
// gradient of the same documents one per padded row, to 1e-5 relative;
// also split into micro-batches, with layers keeping their activations,
// with boundaries recomputed in the backward, and under POET-X. The packed
// rows include a document that starts on a 64-token attention tile, so the
// kernels skip key tiles, one that crosses a tile boundary, and padding
// that continues the last document or restarts. Scoring hands back each
// row's loss, the sum of its documents'. Without the position ids the
// packed rows do not match (the documents would attend across their
// boundaries), and position ids that break the contract are refused.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model/layout.h"
#include "run.h"
#include "tiny.h"

enum { T = 128, DOCS = 8, PACKED_ROWS = 4, LAYERS = 4 };

// Document lengths, and the packed row and offset of each: row 0 one full
// row; row 1 documents at 0, 120 (whose queries find nothing in the first
// key tile) and 123, and 4 tokens of padding whose positions go on from the
// last document; row 2 documents at 0 and 64 (on a tile boundary: its
// query tile skips key tile 0), then padding restarting at 0; row 3
// documents at 0 and 2 (across the tile boundary at 64), then padding.
static const int doc_len[DOCS] = {3, 120, 1, 64, 128, 2, 50, 90};
static const int doc_row[DOCS] = {1, 1, 1, 2, 0, 3, 2, 3};
static const int doc_off[DOCS] = {120, 0, 123, 0, 0, 0, 64, 2};

typedef struct batch {
  int rows;
  int32_t *ids, *labels, *pos; // pos NULL: 0..T-1 in every row
} batch;

typedef struct outcome {
  double loss;     // mean over counted targets
  int64_t count;
  int64_t refwd;   // layer forwards run again in the backward
  float *grads;    // every gradient, HF order
  size_t n;
} outcome;

static batch batch_alloc(int rows, int with_pos) {
  size_t n = (size_t)rows * T;
  batch b = {rows, calloc(n, sizeof(int32_t)), malloc(n * sizeof(int32_t)),
             with_pos ? calloc(n, sizeof(int32_t)) : NULL};
  CHECK(b.ids && b.labels && (b.pos || !with_pos), "out of memory");
  for (size_t i = 0; i < n; i++) b.labels[i] = -100; // padding: id 0, no label
  return b;
}

static void batch_free(batch *b) { free(b->ids), free(b->labels), free(b->pos); }

// The documents' tokens (ids in 1..255, fixed by the seed).
static int32_t tokens[DOCS][T];

// One document per row from position 0, padded: the rows without pos.
static batch one_per_row(void) {
  batch b = batch_alloc(DOCS, 0);
  for (int d = 0; d < DOCS; d++)
    for (int t = 0; t < doc_len[d]; t++) b.ids[(size_t)d * T + t] = b.labels[(size_t)d * T + t] = tokens[d][t];
  return b;
}

// The documents packed as doc_row/doc_off say. A document's first label is
// masked: the previous token (another document's last) would predict it.
static batch packed(void) {
  batch b = batch_alloc(PACKED_ROWS, 1);
  int used[PACKED_ROWS] = {0};
  for (int d = 0; d < DOCS; d++) {
    size_t at = (size_t)doc_row[d] * T + doc_off[d];
    int32_t *ids = b.ids + at, *labels = b.labels + at, *pos = b.pos + at;
    for (int t = 0; t < doc_len[d]; t++) ids[t] = tokens[d][t], labels[t] = t ? tokens[d][t] : -100, pos[t] = t;
    int end = doc_off[d] + doc_len[d];
    used[doc_row[d]] = end > used[doc_row[d]] ? end : used[doc_row[d]];
  }
  // Padding: row 1's continues its last document's positions, the others'
  // restart at 0.
  for (int r = 0; r < PACKED_ROWS; r++)
    for (int t = used[r]; t < T; t++) {
      int32_t *p = b.pos + (size_t)r * T + t;
      p[0] = r == 1 || t > used[r] ? p[-1] + 1 : 0;
    }
  return b;
}

static const char *const proj[7] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                    "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};

// Values of POET-X's θ of projection k's input (side 0) or output (side 1)
// rotations: its blocks of b, b(b-1)/2 each.
static size_t theta_numel(const eng_config *c, int b, int k, int side) {
  const int qd = c->n_heads * c->head_dim, kvd = c->n_kv_heads * c->head_dim;
  const int in[7] = {c->d_model, c->d_model, c->d_model, qd, c->d_model, c->d_model, c->d_ff};
  const int out[7] = {qd, kvd, kvd, c->d_model, c->d_ff, c->d_ff, c->d_model};
  return (size_t)(side ? out[k] : in[k]) / b * (size_t)(b * (b - 1) / 2);
}

static int grab(void *ctx, int shard, const eng_tensor *t) {
  (void)shard;
  void **c = ctx;
  eng_run *r = c[0];
  outcome *o = c[1];
  eng_err e = {0};
  CHECK_OK(eng_debug_param(r, t->name, 'g', o->grads + o->n, t->numel, &e), &e);
  o->n += t->numel;
  return 0;
}

// One forward and backward of b through the executor under spec s (its
// batch and micro-batches set here), with b's position ids or none.
static outcome run(eng_spec s, const batch *b, const int32_t *pos, int micro_batches) {
  s.batch = b->rows;
  s.micro_batches = micro_batches;
  eng_err e = {0};
  eng_run *r;
  CHECK_OK(eng_open(&s, &r, &e), &e);
  eng_exec_result res;
  CHECK_OK(eng_exec_run(r->exec, b->ids, b->labels, pos, 1, NULL, NULL, &res, &e), &e);
  eng_exec_quiesce(r->exec);
  eng_layout lo;
  eng_layout_init(&lo, &s.config);
  // Under POET-X the weights are frozen (their gradients 0) and the θ of
  // every projection's rotations follow them.
  size_t n = lo.total_numel;
  for (int k = 0; s.method == ENG_METHOD_POETX && k < 7; k++)
    n += (size_t)LAYERS * (theta_numel(&s.config, s.poet_block, k, 0) + theta_numel(&s.config, s.poet_block, k, 1));
  outcome o = {res.loss_sum / (double)res.count, res.count, res.refwd_layers, malloc(n * sizeof(float)), 0};
  CHECK(o.grads, "out of memory");
  void *ctx[2] = {r, &o};
  eng_layout_visit(&lo, grab, ctx);
  for (int l = 0; s.method == ENG_METHOD_POETX && l < LAYERS; l++)
    for (int k = 0; k < 7; k++)
      for (int side = 0; side < 2; side++) {
        char name[128];
        snprintf(name, sizeof name, "model.layers.%d.%s.%s", l, proj[k], side ? "theta_out" : "theta_in");
        size_t m = theta_numel(&s.config, s.poet_block, k, side);
        CHECK_OK(eng_debug_param(r, name, 'g', o.grads + o.n, m, &e), &e);
        o.n += m;
      }
  CHECK(o.n == n, "%zu gradients read, %zu expected", o.n, n);
  eng_close(r);
  return o;
}

// Largest |got − ref| over the largest |ref|, tensor by tensor: the worst.
typedef struct cmp {
  const outcome *got, *ref;
  size_t off;
  double worst;
  char name[128]; // the worst tensor's (a visited tensor's name lives only through its visit)
} cmp;

static void cmp_values(cmp *c, const char *name, size_t n) {
  const float *g = c->got->grads + c->off, *r = c->ref->grads + c->off;
  double d = 0, m = 0;
  for (size_t k = 0; k < n; k++) {
    CHECK(isfinite(g[k]), "%s: gradient %zu is %g", name, k, g[k]);
    d = fmax(d, fabs((double)g[k] - r[k]));
    m = fmax(m, fabs((double)r[k]));
  }
  double rel = m > 0 ? d / m : d;
  if (rel >= c->worst) {
    c->worst = rel;
    snprintf(c->name, sizeof c->name, "%s", name);
  }
  c->off += n;
}

static int cmp_tensor(void *ctx, int shard, const eng_tensor *t) {
  (void)shard;
  cmp_values(ctx, t->name, t->numel);
  return 0;
}

// The worst tensor's relative error, its name in worst[128].
static double grad_err(const eng_spec *s, const outcome *got, const outcome *ref, char *worst) {
  eng_layout lo;
  eng_layout_init(&lo, &s->config);
  CHECK(got->n == ref->n, "gradients: %zu values, one per row %zu", got->n, ref->n);
  cmp c = {got, ref, 0, 0, ""};
  eng_layout_visit(&lo, cmp_tensor, &c);
  if (c.off < ref->n) cmp_values(&c, "POET-X θ", ref->n - c.off);
  memcpy(worst, c.name, sizeof c.name);
  return c.worst;
}

static void expect_same_run(const char *what, const eng_spec *s, const outcome *got, const outcome *ref) {
  double lrel = fabs(got->loss - ref->loss) / fabs(ref->loss);
  char worst[128];
  double grel = grad_err(s, got, ref, worst);
  printf("%-58s loss %.8f (rel %.1e), worst gradient rel %.1e (%s)\n", what, got->loss, lrel, grel, worst);
  CHECK(got->count == ref->count, "%s: %lld counted targets, one per row counts %lld", what, (long long)got->count,
        (long long)ref->count);
  CHECK(lrel <= 1e-5, "%s: loss %.9g, one per row %.9g", what, got->loss, ref->loss);
  CHECK(grel <= 1e-5, "%s: gradient of %s off by %.3g relative", what, worst, grel);
}

int main(void) {
  uint64_t x = 0x243f6a8885a308d3ull;
  for (int d = 0; d < DOCS; d++)
    for (int t = 0; t < T; t++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      tokens[d][t] = 1 + (int32_t)(x % 255);
    }
  eng_spec s;
  tiny_spec(&s, LAYERS);
  s.train_path = NULL; // batches come from here
  s.seq_len = T;
  s.grad_dtype = ENG_GRAD_F32; // the comparison is of what the step accumulates
  s.config.init_std = 0.2f;    // peaked attention, so attending across documents would show
  batch one = one_per_row(), pk = packed();

  outcome ref = run(s, &one, NULL, 1);
  printf("%d documents one per row: loss %.8f over %lld targets\n", DOCS, ref.loss, (long long)ref.count);
  int64_t targets = 0; // every token of a document but its first
  for (int d = 0; d < DOCS; d++) targets += doc_len[d] - 1;
  CHECK(ref.count == targets, "one per row counts %lld targets, not %lld", (long long)ref.count, (long long)targets);

  struct {
    const char *what;
    int micro_batches, ckpt_every, keep_acts;
    eng_place place;
  } cases[] = {
      {"packed in 4 rows", 1, 1, 0, ENG_PLACE_DEVICE},
      {"packed, layers keep their activations", 1, 1, 1, ENG_PLACE_DEVICE},
      {"packed, 2 micro-batches, boundaries recomputed", 2, 0, 0, ENG_PLACE_DEVICE},
      {"packed, 4 micro-batches, every other boundary in host memory", 4, 2, 0, ENG_PLACE_HOST},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    eng_spec sc = s;
    sc.ckpt_every = cases[c].ckpt_every, sc.keep_acts = cases[c].keep_acts, sc.ckpt_place = cases[c].place;
    outcome got = run(sc, &pk, pk.pos, cases[c].micro_batches);
    expect_same_run(cases[c].what, &s, &got, &ref);
    CHECK(cases[c].keep_acts ? got.refwd == 0 : got.refwd >= LAYERS, "%s: %lld layer forwards run again",
          cases[c].what, (long long)got.refwd);
    free(got.grads);
  }

  // POET-X layers run the same attention: packed rows give their gradients
  // (θ's) too.
  {
    eng_spec sp = s;
    sp.method = ENG_METHOD_POETX;
    sp.poet_block = 8;
    outcome pref = run(sp, &one, NULL, 1), got = run(sp, &pk, pk.pos, 2);
    expect_same_run("POET-X, packed, 2 micro-batches", &sp, &got, &pref);
    free(pref.grads), free(got.grads);
  }

  // Scoring: each packed row's loss is its documents' (sums over the same
  // targets, so to fp32 rounding).
  {
    eng_err e = {0};
    double row_ref[PACKED_ROWS] = {0}, seq[DOCS], seq_pk[PACKED_ROWS];
    eng_exec_result res;
    eng_spec sc = s;
    eng_run *r;
    sc.batch = DOCS;
    CHECK_OK(eng_open(&sc, &r, &e), &e);
    CHECK_OK(eng_exec_score(r->exec, one.ids, one.labels, NULL, seq, NULL, &res, &e), &e);
    eng_close(r);
    for (int d = 0; d < DOCS; d++) row_ref[doc_row[d]] += seq[d];
    sc.batch = PACKED_ROWS;
    CHECK_OK(eng_open(&sc, &r, &e), &e);
    CHECK_OK(eng_exec_score(r->exec, pk.ids, pk.labels, pk.pos, seq_pk, NULL, &res, &e), &e);
    for (int i = 0; i < PACKED_ROWS; i++)
      CHECK(fabs(seq_pk[i] - row_ref[i]) <= 1e-5 * fabs(row_ref[i]), "scoring: packed row %d's loss %.9g, its "
            "documents' %.9g", i, seq_pk[i], row_ref[i]);
    printf("scoring: each packed row's loss is its documents' sum\n");

    // A position that neither restarts nor follows the one before is refused.
    pk.pos[(size_t)2 * T + 70] = 9;
    int rc = eng_exec_run(r->exec, pk.ids, pk.labels, pk.pos, 1, NULL, NULL, &res, &e);
    CHECK(rc == ENG_EINVAL && strstr(e.msg, "row 2, token 70"), "a broken position id gave %d: %s", rc, e.msg);
    printf("refused: %s\n", e.msg);
    pk.pos[(size_t)2 * T + 70] = 6;
    pk.pos[T] = 1;
    rc = eng_exec_run(r->exec, pk.ids, pk.labels, pk.pos, 1, NULL, NULL, &res, &e);
    CHECK(rc == ENG_EINVAL && strstr(e.msg, "row 1, token 0"), "a row starting at position 1 gave %d: %s", rc, e.msg);
    pk.pos[T] = 0;
    eng_close(r);
  }

  // The control: the same packed rows without their position ids attend
  // across documents, and the loss moves far past the tolerance.
  outcome flat = run(s, &pk, NULL, 1);
  double lrel = fabs(flat.loss - ref.loss) / fabs(ref.loss);
  char worst[128];
  double grel = grad_err(&s, &flat, &ref, worst);
  printf("packed without position ids: loss rel %.1e, worst gradient rel %.1e (%s)\n", lrel, grel, worst);
  CHECK(lrel > 1e-3 && grel > 1e-2, "packed rows without position ids match one per row: the test cannot fail");

  free(flat.grads), free(ref.grads);
  batch_free(&one), batch_free(&pk);
  printf("packing: ok\n");
  return 0;
}
