// ExportJob: a checkpoint's model as a Hugging Face directory, with the
// tokenizer of the directory the job started from, streamed as file chunks.
// storage writes the directory under <state_dir>/export on the libuv
// thread pool (it reads every weight shard); the loop then streams
// each file in 1 MiB chunks, each read on the pool too, one message in
// flight at a time; the directory is removed at the end.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api.h"
#include "log.h"
#include "spec.h"

#define T(x) Traind__V1__##x   // types
#define K(x) TRAIND__V1__##x   // constants

enum { CHUNK = 1 << 20, MAX_FILES = 64 };

typedef struct export_ctx {
  uv_work_t work;
  srv_call *c;            // NULL once the call is over
  traind *d;
  store *st;
  char job[STORE_JOB_MAX + 1];
  int64_t step;
  int bf16;
  eng_config model;
  char *src;              // the model directory the job started from, or NULL
  eng_fs *fs;             // the roots src is read under
  char dir[4200];
  int rc;
  char err[600];
  char files[MAX_FILES][256];
  int n_files, file;      // files to send, the one being sent
  int fd;
  uint64_t size, offset;  // of the current file
  uint8_t *buf;
  ssize_t got;
  int pool;               // a job on the thread pool is in flight (it holds x)
} export_ctx;

static void next_chunk(export_ctx *x);

static void cleanup_dir(const char *dir) {
  DIR *dd = opendir(dir);
  if (dd) {
    struct dirent *de;
    char path[4500];
    while ((de = readdir(dd))) {
      if (de->d_name[0] == '.') continue;
      snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
      unlink(path);
    }
    closedir(dd);
  }
  rmdir(dir);
}

void api_export_scratch_clear(const char *scratch) {
  DIR *dd = opendir(scratch);
  if (!dd) return;
  struct dirent *de;
  char path[4200]; // cleanup_dir appends a name to it
  int n = 0;
  while ((de = readdir(dd))) {
    if (de->d_name[0] == '.') continue;
    if (snprintf(path, sizeof path, "%s/%s", scratch, de->d_name) >= (int)sizeof path) continue;
    cleanup_dir(path);
    unlink(path); // not a directory after all
    n++;
  }
  closedir(dd);
  if (n) log_info("removed %d export leftover%s in %s (exports cut short by the daemon's end)", n, n == 1 ? "" : "s",
                  scratch);
}

static void ctx_free(export_ctx *x) {
  if (x->fd >= 0) close(x->fd);
  if (x->dir[0]) cleanup_dir(x->dir);
  free(x->src);
  eng_fs_free(x->fs);
  free(x->buf);
  free(x);
}

// The call is over (or never got going): free once no pool job runs.
static void on_close(srv_call *c, void *app) {
  (void)c;
  export_ctx *x = app;
  x->c = NULL;
  if (!x->pool) ctx_free(x);
}

static void export_work(uv_work_t *w) {
  export_ctx *x = w->data;
  eng_err e = {0};
  x->rc = store_ckpt_export_hf(x->st, x->job, x->step, &x->model, x->dir, x->bf16, 0, x->fs, x->src, &e);
  if (x->rc) snprintf(x->err, sizeof x->err, "%s", e.msg);
}

static int by_name(const void *a, const void *b) { return strcmp(a, b); }

static void export_done(uv_work_t *w, int status) {
  export_ctx *x = w->data;
  x->pool = 0;
  if (!x->c) {
    ctx_free(x);
    return;
  }
  if (status || x->rc) {
    srv_finish(x->c, GRPC_STATUS_INTERNAL, "export of job %s: %s", x->job, status ? "cancelled" : x->err);
    return;
  }
  DIR *dd = opendir(x->dir);
  struct dirent *de;
  while (dd && (de = readdir(dd)) && x->n_files < MAX_FILES)
    if (de->d_name[0] != '.') snprintf(x->files[x->n_files++], sizeof x->files[0], "%s", de->d_name);
  if (dd) closedir(dd);
  qsort(x->files, (size_t)x->n_files, sizeof x->files[0], by_name);
  x->file = -1;
  next_chunk(x);
}

static void read_work(uv_work_t *w) {
  export_ctx *x = w->data;
  x->got = pread(x->fd, x->buf, CHUNK, (off_t)x->offset);
}

// Not called once the call is over: on_close has freed x then.
static void on_sent(srv_call *c, int ok) {
  export_ctx *x = srv_call_app(c);
  if (ok) next_chunk(x);
}

static void read_done(uv_work_t *w, int status) {
  export_ctx *x = w->data;
  x->pool = 0;
  if (!x->c) {
    ctx_free(x);
    return;
  }
  if (status || x->got < 0 || (x->got == 0 && x->offset < x->size)) {
    srv_finish(x->c, GRPC_STATUS_INTERNAL, "export of job %s: reading %s failed", x->job, x->files[x->file]);
    return;
  }
  T(ExportChunk) ch = K(EXPORT_CHUNK__INIT);
  ch.file = x->files[x->file];
  ch.offset = x->offset;
  ch.data.data = x->buf;
  ch.data.len = (size_t)x->got;
  ch.size = x->size;
  x->offset += (uint64_t)x->got;
  ch.last = x->offset >= x->size;
  srv_send(x->c, &ch.base, on_sent);
}

// The next chunk of the current file, or the next file, or the end.
static void next_chunk(export_ctx *x) {
  if (x->file < 0 || x->offset >= x->size) {
    if (x->fd >= 0) close(x->fd);
    x->fd = -1;
    if (++x->file == x->n_files) {
      srv_finish(x->c, GRPC_STATUS_OK, "%s", "");
      return;
    }
    char path[4500];
    snprintf(path, sizeof path, "%s/%s", x->dir, x->files[x->file]);
    struct stat st;
    x->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (x->fd < 0 || fstat(x->fd, &st)) {
      srv_finish(x->c, GRPC_STATUS_INTERNAL, "export of job %s: %s: %s", x->job, path, strerror(errno));
      return;
    }
    x->size = (uint64_t)st.st_size;
    x->offset = 0;
  }
  x->pool = 1;
  if (uv_queue_work(x->d->loop, &x->work, read_work, read_done)) {
    x->pool = 0;
    srv_finish(x->c, GRPC_STATUS_INTERNAL, "export of job %s: cannot queue a read", x->job);
  }
}

void api_export(srv_call *c, ProtobufCMessage *req) {
  T(ExportJobRequest) *r = (T(ExportJobRequest) *)req;
  traind *d = srv_call_data(c);
  val_err e;
  if (val_export(r, &e)) {
    api_refuse(c, &e);
    return;
  }
  job *j = api_job(c, d, r->job_id);
  if (!j) return;
  eng_err ee = {0};
  int64_t step = r->step;
  if (step == 0) {
    int rc = store_ckpt_latest(d->st, j->id, &step, &ee);
    if (rc) {
      srv_fail(c, rc == 1 ? GRPC_STATUS_FAILED_PRECONDITION : GRPC_STATUS_UNAVAILABLE, "job_id: %s",
               rc == 1 ? "the job has no checkpoint yet" : ee.msg);
      return;
    }
  } else {
    int64_t steps[1024];
    int n = 0, found = 0;
    if (store_ckpt_list(d->st, j->id, steps, 1024, &n, &ee)) {
      srv_fail(c, GRPC_STATUS_UNAVAILABLE, "storage: %s", ee.msg);
      return;
    }
    for (int i = 0; i < n && i < 1024; i++) found |= steps[i] == step;
    if (!found) {
      srv_fail(c, GRPC_STATUS_NOT_FOUND, "step: job %s has no checkpoint at step %lld", j->id, (long long)step);
      return;
    }
  }
  // The tokenizer and the token ids go with the model, from the directory
  // the job started from, which must still be there (and under a root).
  char *src = NULL;
  owner_access who; // the model directory is read with its owner's access
  owner_access_of_job(j, &who);
  val_roots roots = {d->cfg.roots, d->cfg.n_roots, &who};
  val_err ve;
  if (j->spec->model->source_case == K(MODEL_SPEC__SOURCE_HF_DIR) &&
      val_path(j->spec->model->hf_dir, "spec.model.hf_dir", 1, &roots, &src, &ve)) {
    srv_fail(c, GRPC_STATUS_FAILED_PRECONDITION,
             "the job's %s; an export takes the tokenizer files and token ids from there", ve.msg);
    return;
  }
  export_ctx *x = calloc(1, sizeof *x);
  if (!x || !(x->buf = malloc(CHUNK))) {
    free(x);
    free(src);
    srv_fail(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "request: out of memory for an export");
    return;
  }
  x->src = src;
  x->fd = -1;
  if (src && spec_fs(&roots, &x->fs, &ve)) {
    srv_fail(c, ve.code, "%s", ve.msg);
    ctx_free(x);
    return;
  }
  x->c = c;
  x->d = d;
  x->st = d->st;
  x->work.data = x;
  snprintf(x->job, sizeof x->job, "%s", j->id);
  x->step = step;
  x->bf16 = r->bf16;
  x->model = j->model;
  snprintf(x->dir, sizeof x->dir, "%s/export/%s-XXXXXX", d->cfg.state_dir, j->id);
  srv_on_close(c, on_close, x);
  if (!mkdtemp(x->dir)) {
    srv_fail(c, GRPC_STATUS_INTERNAL, "export: cannot create a directory under %s/export: %s", d->cfg.state_dir,
             strerror(errno));
    x->dir[0] = 0;
    return;
  }
  x->pool = 1;
  if (uv_queue_work(d->loop, &x->work, export_work, export_done)) {
    x->pool = 0;
    srv_fail(c, GRPC_STATUS_INTERNAL, "export of job %s: cannot queue the work", j->id);
  }
}
