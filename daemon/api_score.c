// ScoreData: each sample's mean loss under a model, as a scores file for a
// job's select.band_file (DESIGN §8). The model and the data are opened with
// the caller's access and scored on the libuv thread pool (beside the
// device's job: the cpu backend); the loop then streams the file's text in
// chunks, one message in flight at a time.
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "spec.h"

#define T(x) Traind__V1__##x   // types
#define K(x) TRAIND__V1__##x   // constants

enum { CHUNK = 1 << 20 }; // bytes of the scores file per message

typedef struct score_ctx {
  uv_work_t work;
  srv_call *c;      // NULL once the call is over
  traind *d;
  char *model_dir, *data_path;
  eng_fs *fs;
  int seq_len, batch;
  int64_t cap;
  int rc;
  char err[600];
  char *text;       // the scores file
  size_t len, sent;
  uint64_t n;
  double flops;
  int pool;         // the work is on the pool (it holds x)
} score_ctx;

static void ctx_free(score_ctx *x) {
  free(x->model_dir);
  free(x->data_path);
  eng_fs_free(x->fs);
  free(x->text);
  free(x);
}

static void on_close(srv_call *c, void *app) {
  (void)c;
  score_ctx *x = app;
  x->c = NULL;
  if (!x->pool) ctx_free(x);
}

static void score_work(uv_work_t *w) {
  score_ctx *x = w->data;
  eng_spec s;
  eng_spec_defaults(&s);
  s.model_dir = x->model_dir;
  s.fs = x->fs;
  s.seq_len = x->seq_len;
  s.batch = x->batch;
  s.device_cap = (size_t)x->cap;
  eng_err e = {0};
  eng_run *r = NULL;
  x->rc = eng_open(&s, &r, &e);
  float *loss = NULL;
  if (!x->rc) x->rc = eng_score_samples(r, x->data_path, &loss, &x->n, &x->flops, &e);
  if (!x->rc && !(x->text = eng_scores_text(loss, x->n, x->seq_len, &x->len)))
    x->rc = eng_err_set(&e, ENG_ENOMEM, "cannot format %llu scores", (unsigned long long)x->n);
  if (x->rc) snprintf(x->err, sizeof x->err, "%s", e.msg);
  free(loss);
  eng_close(r);
}

static void send_next(score_ctx *x);

static void on_sent(srv_call *c, int ok) {
  score_ctx *x = srv_call_app(c);
  if (ok) send_next(x);
}

static void send_next(score_ctx *x) {
  if (x->sent == x->len) {
    srv_finish(x->c, GRPC_STATUS_OK, "%s", "");
    return;
  }
  T(ScoreChunk) ch = K(SCORE_CHUNK__INIT);
  ch.data.data = (uint8_t *)x->text + x->sent;
  ch.data.len = x->len - x->sent < CHUNK ? x->len - x->sent : CHUNK;
  x->sent += ch.data.len;
  ch.last = x->sent == x->len;
  ch.samples = x->n;
  ch.model_flops = x->flops;
  srv_send(x->c, &ch.base, on_sent);
}

static void score_done(uv_work_t *w, int status) {
  score_ctx *x = w->data;
  x->pool = 0;
  if (!x->c) {
    ctx_free(x);
    return;
  }
  if (status || x->rc)
    srv_finish(x->c, x->rc == ENG_EINVAL ? GRPC_STATUS_INVALID_ARGUMENT : GRPC_STATUS_FAILED_PRECONDITION, "%s",
               status ? "scoring was cancelled" : x->err);
  else
    send_next(x);
}

void api_score(srv_call *c, ProtobufCMessage *req) {
  T(ScoreDataRequest) *r = (T(ScoreDataRequest) *)req;
  traind *d = srv_call_data(c);
  val_err e;
  owner_access who; // the files are read with the caller's access
  owner_access_of(srv_call_caller(c), &who);
  val_roots roots = {d->cfg.roots, d->cfg.n_roots, &who};
  score_ctx *x = calloc(1, sizeof *x);
  if (!x) {
    srv_fail(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "request: out of memory for scoring");
    return;
  }
  if (val_score(r, &e) || val_path(r->model_dir, "model_dir", 1, &roots, &x->model_dir, &e) ||
      val_path(r->data_path, "data_path", 0, &roots, &x->data_path, &e) || spec_fs(&roots, &x->fs, &e)) {
    ctx_free(x);
    api_refuse(c, &e);
    return;
  }
  x->c = c;
  x->d = d;
  x->seq_len = r->seq_len;
  x->batch = r->batch_size ? r->batch_size : 8;
  x->cap = d->cfg.cpu_memory_bytes;
  x->work.data = x;
  srv_on_close(c, on_close, x);
  x->pool = 1;
  if (uv_queue_work(d->loop, &x->work, score_work, score_done)) {
    x->pool = 0;
    srv_fail(c, GRPC_STATUS_INTERNAL, "ScoreData: cannot queue the work");
  }
}
