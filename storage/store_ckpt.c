// Writing a checkpoint: begin, put shards, commit.
//
// begin writes a synced 'P' marker naming the attempt, so that whatever
// happens next the attempt's shards can be found and collected. Shards go in
// without the WAL (writing them twice would halve the rate) with their
// crc32c noted. commit flushes the family, which makes every shard durable in
// SST and blob files, and only then writes the manifest, the job's 'C' field
// and the marker's deletion in one synced batch: a crash before that batch
// leaves no manifest, a crash after it a complete checkpoint.
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/crc32c.h"
#include "store_impl.h"

struct store_ckpt {
  store *s;
  char job[STORE_JOB_MAX + 1];
  int64_t step;
  uint64_t attempt; // the sequence number at begin: unique per attempt
  uint64_t gen;     // the store's generation at begin
  store_shard *shards;
  int count, cap;
};

#define CKPT_FMT "checkpoint of job \"%s\" at step %" PRId64

int store_ckpt_begin(store *s, const char *job, int64_t step, store_ckpt **out, eng_err *e) {
  *out = NULL;
  int rc = store_job_check(job, e);
  if (rc) return rc;
  if (step < 0) return eng_err_set(e, ENG_EINVAL, "job \"%s\": checkpoint step %" PRId64 " is negative", job, step);
  store_ckpt *c = calloc(1, sizeof *c);
  if (!c) return eng_err_set(e, ENG_ENOMEM, CKPT_FMT ": cannot allocate", job, step);
  c->s = s;
  snprintf(c->job, sizeof c->job, "%s", job);
  c->step = step;
  if ((rc = store_enter(s, e))) {
    free(c);
    return rc;
  }
  // Under meta_mu the marker's write moves the sequence number past the
  // attempt before any other begin can read it.
  pthread_mutex_lock(&s->meta_mu);
  c->attempt = rocksdb_get_latest_sequence_number(s->db);
  c->gen = s->gen;
  skey k = key_ckpt('P', job, step);
  key_be64(&k, c->attempt);
  char *err = NULL;
  rocksdb_put_cf(s->db, s->w_sync, s->cf[CF_CKPT], k.b, k.n, "", 0, &err);
  pthread_mutex_unlock(&s->meta_mu);
  if (err) rc = store_rocks_err(s, err, 1, e, CKPT_FMT ": begin", job, step);
  store_leave(s);
  if (rc) free(c);
  else *out = c;
  return rc;
}

// A reopen (after a failed write) discarded the unflushed shards of every
// checkpoint begun before it and collected their markers.
static int check_gen(store_ckpt *c, eng_err *e) {
  if (c->gen == c->s->gen) return 0;
  return eng_err_set(e, ENG_ESTATE, CKPT_FMT ": the store was reopened after a failed write since this "
                     "checkpoint began; its shards are gone, begin it again", c->job, c->step);
}

int store_ckpt_put(store_ckpt *c, const char *name, const void *data, size_t n, eng_err *e) {
  int rc = store_name_check(name, e);
  if (rc) return eng_err_prefix(e, CKPT_FMT ": ", c->job, c->step);
  for (int i = 0; i < c->count; i++)
    if (!strcmp(c->shards[i].name, name))
      return eng_err_set(e, ENG_EINVAL, CKPT_FMT ": shard \"%s\" put twice", c->job, c->step, name);
  if (c->count == c->cap) {
    int cap = c->cap ? 2 * c->cap : 64;
    store_shard *grown = realloc(c->shards, (size_t)cap * sizeof *grown);
    if (!grown) return eng_err_set(e, ENG_ENOMEM, CKPT_FMT ": cannot allocate the manifest", c->job, c->step);
    c->shards = grown;
    c->cap = cap;
  }
  store *s = c->s;
  if ((rc = store_enter(s, e))) return rc;
  if (!(rc = check_gen(c, e))) {
    skey k = key_ckpt_data(c->job, c->step, c->attempt);
    key_str(&k, name);
    char *err = NULL;
    rocksdb_put_cf(s->db, s->w_nowal, s->cf[CF_CKPT], k.b, k.n, data, n, &err);
    if (err) rc = store_rocks_err(s, err, 1, e, CKPT_FMT ": shard \"%s\"", c->job, c->step, name);
  }
  store_leave(s);
  if (rc) return rc;
  store_shard *sh = &c->shards[c->count++];
  snprintf(sh->name, sizeof sh->name, "%s", name);
  sh->size = n;
  sh->crc = eng_crc32c(0, data, n);
  store_fault_point("ckpt_put");
  return 0;
}

// The batch that makes the checkpoint exist. Caller holds meta_mu.
static int write_manifest(store_ckpt *c, store_manifest *old, int *had_old, eng_err *e) {
  store *s = c->s;
  int rc = store_manifest_read(s, c->job, c->step, old, e);
  if (rc < 0) return rc;
  *had_old = rc == 0;
  store_manifest m = {c->step, c->attempt, c->count, c->shards};
  char *buf;
  size_t n;
  if ((rc = store_manifest_encode(&m, &buf, &n, e))) return rc;
  rocksdb_writebatch_t *b = rocksdb_writebatch_create();
  skey km = key_ckpt('M', c->job, c->step), kp = km, kc = key_tag('C');
  kp.b[0] = 'P';
  key_be64(&kp, c->attempt);
  key_job(&kc, c->job);
  skey step_be = {.n = 0};
  key_be64(&step_be, (uint64_t)c->step);
  rocksdb_writebatch_put_cf(b, s->cf[CF_CKPT], km.b, km.n, buf, n);
  rocksdb_writebatch_delete_cf(b, s->cf[CF_CKPT], kp.b, kp.n);
  rocksdb_writebatch_put_cf(b, s->cf[CF_JOBS], kc.b, kc.n, step_be.b, step_be.n);
  if (*had_old && old->attempt != c->attempt) { // a re-save of this step replaces the old shards
    skey lo = key_ckpt_data(c->job, c->step, old->attempt), hi = key_next(lo);
    rocksdb_writebatch_delete_range_cf(b, s->cf[CF_CKPT], lo.b, lo.n, hi.b, hi.n);
  }
  char *err = NULL;
  rocksdb_write(s->db, s->w_sync, b, &err);
  rocksdb_writebatch_destroy(b);
  free(buf);
  if (err) rc = store_rocks_err(s, err, 1, e, CKPT_FMT ": writing the manifest", c->job, c->step);
  return rc;
}

int store_ckpt_commit(store_ckpt *c, eng_err *e) {
  store *s = c->s;
  int rc = store_enter(s, e);
  if (rc) {
    store_ckpt_abort(c);
    return rc;
  }
  if (!(rc = check_gen(c, e))) {
    store_fault_point("ckpt_flush");
    char *err = NULL;
    rocksdb_flush_cf(s->db, s->flush, s->cf[CF_CKPT], &err);
    if (err) rc = store_rocks_err(s, err, 1, e, CKPT_FMT ": flushing %d shards", c->job, c->step, c->count);
  }
  store_manifest old = {0};
  int had_old = 0;
  if (!rc) {
    store_fault_point("ckpt_manifest");
    pthread_mutex_lock(&s->meta_mu);
    rc = write_manifest(c, &old, &had_old, e);
    pthread_mutex_unlock(&s->meta_mu);
  }
  if (!rc) {
    store_fault_point("ckpt_done");
    if (had_old && old.attempt != c->attempt) {
      skey lo = key_ckpt_data(c->job, c->step, old.attempt), hi = key_next(lo);
      store_reclaim(s, CF_CKPT, &lo, &hi);
    }
  }
  if (had_old) store_manifest_free(&old);
  store_leave(s);
  if (rc) {
    store_ckpt_abort(c);
    return rc;
  }
  free(c->shards);
  free(c);
  return 0;
}

// Deletes the attempt's shards and marker now when the database takes
// writes; otherwise the marker makes the next open collect them.
void store_ckpt_abort(store_ckpt *c) {
  if (!c) return;
  store *s = c->s;
  if (!store_enter(s, NULL)) {
    rocksdb_writebatch_t *b = rocksdb_writebatch_create();
    skey lo = key_ckpt_data(c->job, c->step, c->attempt), hi = key_next(lo);
    skey kp = key_ckpt('P', c->job, c->step);
    key_be64(&kp, c->attempt);
    rocksdb_writebatch_delete_range_cf(b, s->cf[CF_CKPT], lo.b, lo.n, hi.b, hi.n);
    rocksdb_writebatch_delete_cf(b, s->cf[CF_CKPT], kp.b, kp.n);
    char *err = NULL;
    rocksdb_write(s->db, s->w_sync, b, &err);
    rocksdb_writebatch_destroy(b);
    if (err) store_rocks_err(s, err, 1, NULL, CKPT_FMT ": abort", c->job, c->step);
    else store_reclaim(s, CF_CKPT, &lo, &hi);
    store_leave(s);
  }
  free(c->shards);
  free(c);
}
