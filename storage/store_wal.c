// What recovery cut from the write-ahead log at open (store.h,
// store_wal_dropped), read back from RocksDB's info log: the 7.8 C API
// gives no other way to hear of it.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_impl.h"

void store_wal_clear(store *s) {
  free(s->wal_dropped);
  s->wal_dropped = NULL;
}

void store_wal_scan(store *s) {
  store_wal_clear(s);
  char path[4200];
  snprintf(path, sizeof path, "%s/LOG", s->dir);
  FILE *f = fopen(path, "r");
  if (!f) return;
  char *out = NULL, *line = NULL;
  size_t n = 0, cap = 0;
  FILE *m = open_memstream(&out, &n);
  while (m && getline(&line, &cap, f) > 0) {
    // "<time> <thread> [WARN] [db/db_impl/db_impl_open.cc:982] <wal>: dropping <n> bytes; Corruption: ..."
    // (the log reader's reporter while the WAL is replayed).
    char *drop = strstr(line, ": dropping ");
    if (!drop || !strstr(drop, "Corruption")) continue;
    char *msg = line;
    for (char *q; (q = strstr(msg, "] ")) && q < drop;) msg = q + 2;
    fprintf(m, "%s%s", msg, strchr(msg, '\n') ? "" : "\n");
  }
  free(line);
  fclose(f);
  if (m) fclose(m);
  if (n) s->wal_dropped = out;
  else free(out);
}

const char *store_wal_dropped(const store *s) { return s->wal_dropped; }
