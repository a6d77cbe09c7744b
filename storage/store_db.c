// The database's lifecycle: open with the family and format checks and the
// collection of leftovers, close, and the reopen that follows a failed write (RocksDB 7.8's C API has no DB::Resume, and after a failed
// write or flush the database refuses every write until it is reopened).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store_impl.h"

static const char *const FAMILY[CF_COUNT] = {"jobs", "events", "ckpt", "act"};
static const char FORMAT_KEY[] = "traind.format";

// Whether the database, opened read-only with the families it has, holds
// no key at all.
static int holds_nothing(store *s, char **names, size_t n) {
  const rocksdb_options_t *opts[1 + CF_COUNT];
  rocksdb_column_family_handle_t *h[1 + CF_COUNT];
  for (size_t i = 0; i < n; i++) opts[i] = s->dbo;
  char *err = NULL;
  rocksdb_t *db = rocksdb_open_for_read_only_column_families(s->dbo, s->dir, (int)n, (const char *const *)names,
                                                             opts, h, 0, &err);
  if (err) {
    rocksdb_free(err);
    return 0;
  }
  int empty = 1;
  for (size_t i = 0; i < n; i++) {
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(db, s->rd, h[i]);
    rocksdb_iter_seek_to_first(it);
    empty &= !rocksdb_iter_valid(it);
    rocksdb_iter_destroy(it);
    rocksdb_column_family_handle_destroy(h[i]);
  }
  rocksdb_close(db);
  return empty;
}

// An existing database must have our families and no other. One that has
// only some of them and holds nothing was being created when its process
// died (RocksDB creates the families one by one after the database):
// *unfinished tells the open to create the rest.
static int check_families(store *s, int *unfinished, eng_err *e) {
  size_t n = 0;
  char *err = NULL;
  char **names = rocksdb_list_column_families(s->dbo, s->dir, &n, &err);
  if (err) {
    if (names) rocksdb_list_column_families_destroy(names, 0); // an empty array, still allocated
    return store_rocks_err(s, err, 0, e, "cannot open the store in %s", s->dir);
  }
  int rc = 0, have = 0;
  for (size_t i = 0; i < n && !rc; i++) {
    int known = !strcmp(names[i], "default");
    for (int f = 0; f < CF_COUNT; f++)
      if (!strcmp(names[i], FAMILY[f])) known = 1, have++;
    if (!known)
      rc = eng_err_set(e, STORE_EVERSION, "%s: unknown column family \"%s\": not a traind store, or one "
                       "written by a newer version", s->dir, names[i]);
  }
  *unfinished = !rc && have < CF_COUNT && holds_nothing(s, names, n);
  rocksdb_list_column_families_destroy(names, n);
  if (!rc && have < CF_COUNT && !*unfinished)
    rc = eng_err_set(e, STORE_EVERSION, "%s: a RocksDB database without traind's column families (jobs, "
                     "events, ckpt, act): not a traind store", s->dir);
  return rc;
}

static int family_empty(store *s, rocksdb_column_family_handle_t *cf) {
  rocksdb_iterator_t *it = rocksdb_create_iterator_cf(s->db, s->rd, cf);
  rocksdb_iter_seek_to_first(it);
  int empty = !rocksdb_iter_valid(it);
  rocksdb_iter_destroy(it);
  return empty;
}

// A new database gets the format key; an existing one must carry ours. One
// without the key that holds nothing was interrupted while being created
// (the key is written last), and is finished now.
static int check_format(store *s, eng_err *e) {
  char *err = NULL;
  size_t n = 0;
  char *v = rocksdb_get_cf(s->db, s->rd, s->def, FORMAT_KEY, sizeof FORMAT_KEY - 1, &n, &err);
  if (err) return store_rocks_err(s, err, 0, e, "%s: cannot read the format version", s->dir);
  if (v) {
    char text[32];
    snprintf(text, sizeof text, "%.*s", (int)(n < 31 ? n : 31), v);
    rocksdb_free(v);
    if (strcmp(text, "1"))
      return eng_err_set(e, STORE_EVERSION, "%s: store format version \"%s\" is unknown to this build "
                         "(it reads version %d)", s->dir, text, STORE_FORMAT_VERSION);
    return 0;
  }
  int empty = 1;
  for (int f = 0; f < CF_COUNT; f++) empty &= family_empty(s, s->cf[f]);
  if (!empty || !family_empty(s, s->def))
    return eng_err_set(e, STORE_EVERSION, "%s: no \"%s\" key: not a traind store", s->dir, FORMAT_KEY);
  char ver[16];
  snprintf(ver, sizeof ver, "%d", STORE_FORMAT_VERSION);
  rocksdb_put_cf(s->db, s->w_sync, s->def, FORMAT_KEY, sizeof FORMAT_KEY - 1, ver, strlen(ver), &err);
  return err ? store_rocks_err(s, err, 1, e, "%s: cannot write the format version", s->dir) : 0;
}

int store_db_open(store *s, eng_err *e) {
  struct stat st;
  if (stat(s->dir, &st) == 0 && !S_ISDIR(st.st_mode))
    return eng_err_set(e, ENG_EIO, "cannot open the store in %s: not a directory", s->dir);
  char current[4200];
  snprintf(current, sizeof current, "%s/CURRENT", s->dir);
  int existed = access(current, F_OK) == 0, unfinished = 0;
  int rc = existed ? check_families(s, &unfinished, e) : 0;
  if (rc) return rc;
  rocksdb_options_set_create_missing_column_families(s->dbo, !existed || unfinished);
  const char *names[1 + CF_COUNT] = {"default"};
  const rocksdb_options_t *opts[1 + CF_COUNT] = {s->dbo};
  for (int f = 0; f < CF_COUNT; f++) names[1 + f] = FAMILY[f], opts[1 + f] = s->cfo[f];
  rocksdb_column_family_handle_t *h[1 + CF_COUNT];
  char *err = NULL;
  s->db = rocksdb_open_column_families(s->dbo, s->dir, 1 + CF_COUNT, names, opts, h, &err);
  if (err) {
    s->db = NULL;
    return store_rocks_err(s, err, 0, e, "cannot open the store in %s", s->dir);
  }
  s->def = h[0];
  for (int f = 0; f < CF_COUNT; f++) s->cf[f] = h[1 + f];
  store_wal_scan(s);
  if (!rc) rc = check_format(s, e);
  if (!rc) rc = store_gc_pending(s, e);
  if (!rc) rc = store_gc_act_reset(s, e);
  if (rc) store_db_close(s);
  return rc;
}

void store_db_close(store *s) {
  if (!s->db) return;
  rocksdb_column_family_handle_destroy(s->def);
  for (int f = 0; f < CF_COUNT; f++) rocksdb_column_family_handle_destroy(s->cf[f]);
  rocksdb_close(s->db);
  s->db = NULL;
}

int store_open(store **out, const char *dir, const store_options *o, eng_err *e) {
  *out = NULL;
  if (!dir || !*dir || strlen(dir) >= sizeof((store *)0)->dir)
    return eng_err_set(e, ENG_EINVAL, "store directory must be a path of 1 to %zu bytes",
                       sizeof((store *)0)->dir - 1);
  store *s = calloc(1, sizeof *s);
  if (!s) return eng_err_set(e, ENG_ENOMEM, "cannot allocate a store for %s", dir);
  snprintf(s->dir, sizeof s->dir, "%s", dir);
  if (o) s->opt = *o;
  else store_options_defaults(&s->opt);
  if (s->opt.act_buffer_bytes < ((size_t)1 << 20) || s->opt.act_buffers < 2) {
    free(s);
    return eng_err_set(e, ENG_EINVAL, "store %s: act buffers must be at least 1 MiB and at least 2 of them "
                       "(got %zu bytes, %d)", dir, o->act_buffer_bytes, o->act_buffers);
  }
  int rc = store_options_make(s, e);
  if (!rc) rc = store_db_open(s, e);
  if (rc) {
    store_wal_clear(s);
    store_options_free(s);
    free(s);
    return rc;
  }
  pthread_rwlock_init(&s->lock, NULL);
  pthread_mutex_init(&s->meta_mu, NULL);
  *out = s;
  for (int t = 0; t < STORE_IO_THREADS; t++)
    if (eng_worker_start(&s->io[t], 64, "traind-store-io")) {
      store_close(s);
      *out = NULL;
      return eng_err_set(e, ENG_ENOMEM, "%s: cannot start the store's I/O threads", dir);
    }
  return 0;
}

void store_close(store *s) {
  if (!s) return;
  for (int t = 0; t < STORE_IO_THREADS; t++) eng_worker_stop(&s->io[t]);
  store_db_close(s);
  store_wal_clear(s);
  store_options_free(s);
  pthread_rwlock_destroy(&s->lock);
  pthread_mutex_destroy(&s->meta_mu);
  free(s);
}

// Writes reach the log file (the OS) as they are made, so a process that
// dies keeps them; the sync is for the machine that dies.
int store_sync(store *s, eng_err *e) {
  int rc = store_enter(s, e);
  if (rc) return rc;
  char *err = NULL;
  rocksdb_flush_wal(s->db, 1, &err);
  if (err) rc = store_rocks_err(s, err, 1, e, "syncing the write-ahead log");
  store_leave(s);
  return rc;
}

// Closes and opens the database again; on failure it stays closed and the
// next store_enter tries again. Caller holds the lock exclusively.
static int reopen(store *s, eng_err *e) {
  store_db_close(s);
  s->gen++;
  int rc = store_db_open(s, e);
  return rc ? eng_err_prefix(e, "reopening after a failed write: ") : 0;
}

int store_enter(store *s, eng_err *e) {
  pthread_rwlock_rdlock(&s->lock);
  if (s->db) return 0;
  pthread_rwlock_unlock(&s->lock);
  pthread_rwlock_wrlock(&s->lock);
  int rc = s->db ? 0 : reopen(s, e);
  pthread_rwlock_unlock(&s->lock);
  if (rc) return rc;
  return store_enter(s, e);
}

void store_leave(store *s) {
  uint64_t failed_gen = s->gen;
  pthread_rwlock_unlock(&s->lock);
  if (!atomic_exchange(&s->need_reopen, 0)) return;
  pthread_rwlock_wrlock(&s->lock);
  // Another operation may have reopened it already.
  if (s->gen == failed_gen && s->db) reopen(s, NULL);
  pthread_rwlock_unlock(&s->lock);
}
