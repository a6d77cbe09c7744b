// A write-ahead log whose last record fails its checksum (a write torn or
// damaged on disk when the daemon was killed): the restarted daemon
// recovers the database to the record before it, says in its log which WAL
// and how many bytes were dropped, and serves the jobs it has.
#define _GNU_SOURCE
#include <dirent.h>

#include "e2e/daemon.h"

int main(void) {
  td t;
  char a[80];
  td_ran_and_killed(&t, "wal.yaml", a, sizeof a);

  // The newest non-empty WAL file: one byte of its last record flipped.
  char db[700], wal[1000] = "";
  snprintf(db, sizeof db, "%s/db", t.state);
  DIR *d = opendir(db);
  CHECK(d, "opendir %s", db);
  struct dirent *de;
  char best[256] = "";
  while ((de = readdir(d))) {
    size_t n = strlen(de->d_name);
    char p[1000];
    snprintf(p, sizeof p, "%s/%s", db, de->d_name);
    struct stat st;
    if (n > 4 && !strcmp(de->d_name + n - 4, ".log") && stat(p, &st) == 0 && st.st_size > 64 &&
        strcmp(de->d_name, best) > 0)
      snprintf(best, sizeof best, "%s", de->d_name);
  }
  closedir(d);
  CHECK(best[0], "no write-ahead log with records in %s", db);
  snprintf(wal, sizeof wal, "%s/%s", db, best);
  FILE *f = fopen(wal, "r+b");
  CHECK(f && fseek(f, -5, SEEK_END) == 0, "open %s", wal);
  int c = fgetc(f);
  CHECK(c != EOF && fseek(f, -5, SEEK_END) == 0 && fputc(c ^ 0xff, f) != EOF && fclose(f) == 0, "flip a byte of %s", wal);
  printf("flipped a byte of the last record of %s\n", wal);

  td_start(&t);
  char want[1200];
  snprintf(want, sizeof want, "storage: recovery dropped a write-ahead log tail that failed its checksum");
  CHECK(td_log_count(&t, want) == 1, "the daemon did not log the dropped WAL tail (see %s)", t.log);
  snprintf(want, sizeof want, "%s: dropping ", wal);
  CHECK(td_log_count(&t, want) == 1 && td_log_count(&t, " bytes; Corruption: checksum mismatch") == 1,
        "the log does not name %s and the bytes dropped (see %s)", wal, t.log);
  Traind__V1__Job *j = td_get(&t, a);
  CHECK(j, "job %s is gone after the recovery", a);
  protobuf_c_message_free_unpacked(&j->base, NULL);
  // The database takes writes again: a new job runs.
  char b[80];
  snprintf(b, sizeof b, "%s", td_submit(&t, td_jobfile("after.yaml", 4, 2, NULL), NULL));
  td_wait_success(&t, b, 120);
  printf("the dropped tail was logged; job %s kept, job %s ran after the recovery\n", a, b);
  td_finish(&t);
  return 0;
}
