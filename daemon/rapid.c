// Rapid-reset counting (rapid.h).
#define _GNU_SOURCE // struct ucred
#include "rapid.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

#include "log.h"

// One connection's count, indexed by its fd. A number the core has closed
// may be reused by a new connection: the socket's inode tells them apart.
typedef struct count {
  ino_t ino;
  uint64_t win_ms; // the current one-second window
  int n;           // cancelled calls in it
  int cut;         // shut down already
} count;

struct rapid {
  char *path;
  int max;
  count *by_fd;
  int n_fd;
};

rapid *rapid_new(const char *path, int max_per_s) {
  rapid *r = calloc(1, sizeof *r);
  if (!r || !(r->path = strdup(path))) {
    free(r);
    return NULL;
  }
  r->max = max_per_s;
  return r;
}

static uint64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void rapid_note(rapid *r, int fd) {
  struct stat st;
  if (fd < 0 || fstat(fd, &st) || !S_ISSOCK(st.st_mode)) return;
  if (fd >= r->n_fd) {
    int n = fd + 64;
    count *c = realloc(r->by_fd, (size_t)n * sizeof *c);
    if (!c) return; // uncounted: the flood is cut a little later
    memset(c + r->n_fd, 0, (size_t)(n - r->n_fd) * sizeof *c);
    r->by_fd = c;
    r->n_fd = n;
  }
  count *c = &r->by_fd[fd];
  uint64_t now = mono_ms();
  if (c->ino != st.st_ino) *c = (count){.ino = st.st_ino, .win_ms = now};
  if (now - c->win_ms >= 1000) {
    c->win_ms = now;
    c->n = 0;
  }
  if (++c->n <= r->max || c->cut) return;
  struct ucred uc = {0, (uid_t)-1, (gid_t)-1};
  socklen_t len = sizeof uc;
  getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &len);
  shutdown(fd, SHUT_RDWR);
  c->cut = 1;
  log_warn("socket %s: uid %u pid %d reset more than %d calls within a second before they were answered; "
           "closing its connection (HTTP/2 rapid reset)",
           r->path, (unsigned)uc.uid, (int)uc.pid, r->max);
}

void rapid_free(rapid *r) {
  if (!r) return;
  free(r->path);
  free(r->by_fd);
  free(r);
}
