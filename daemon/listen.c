#define _GNU_SOURCE // accept4, struct ucred
#include "listen.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "log.h"
#include "owner.h"

// What the listener knows of one accepted connection, indexed by its fd.
// The core closes the fd when the connection ends, and the number may then
// be reused: an entry counts only while fstat still finds its socket (ino).
typedef struct conn {
  ino_t ino;          // 0: no entry
  lsn_peer peer;
} conn;

struct lsn {
  uv_loop_t *loop;
  lsn_options o;
  char *path, *lock_path;
  int fd, lock_fd, reserve_fd;
  uv_poll_t poll;
  uv_timer_t backoff;
  uint64_t backoff_ms;  // the next pause when accepting fails; 0: none now
  int full;             // refusing connections at max_connections (logged once per episode)
  conn *conns;
  int n_conns;          // entries in conns (the highest fd + 1)
  int bound;            // the socket file is ours to remove
  int closing;          // handles still closing
  void (*done)(void *);
  void *done_arg;
};

static int conn_live(const conn *c, int fd) {
  struct stat st;
  return c->ino && fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_ino == c->ino;
}

// Open connections; entries whose socket is gone are cleared on the way.
static int conns_live(lsn *l) {
  int n = 0;
  for (int fd = 0; fd < l->n_conns; fd++) {
    if (!l->conns[fd].ino) continue;
    if (conn_live(&l->conns[fd], fd)) n++;
    else l->conns[fd].ino = 0;
  }
  return n;
}

static int conn_add(lsn *l, int fd, const lsn_peer *p) {
  struct stat st;
  if (fstat(fd, &st)) return -1;
  if (fd >= l->n_conns) {
    int n = fd + 64;
    conn *c = realloc(l->conns, (size_t)n * sizeof *c);
    if (!c) return -1;
    memset(c + l->n_conns, 0, (size_t)(n - l->n_conns) * sizeof *c);
    l->conns = c;
    l->n_conns = n;
  }
  l->conns[fd] = (conn){.ino = st.st_ino, .peer = *p};
  return 0;
}

// A descriptor kept free for the moment descriptors run out: closing it
// lets the listener accept the waiting client only to close it at once, so
// that client hears "closed" instead of hanging in the backlog.
static void reserve_take(lsn *l) {
  if (l->reserve_fd < 0) l->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

static void on_poll(uv_poll_t *h, int status, int events);

static void on_backoff(uv_timer_t *t) {
  lsn *l = t->data;
  reserve_take(l);
  if (!l->closing) uv_poll_start(&l->poll, UV_READABLE, on_poll);
}

// Accepting failed for want of a resource: pause, twice as long each time
// in a row (10 ms .. 1 s), then try again.
static void accept_pause(lsn *l, int err) {
  if (!l->backoff_ms)
    log_warn("socket %s: accept: %s; turning clients away and retrying until descriptors are free", l->path,
             strerror(err));
  if (l->reserve_fd >= 0) {
    close(l->reserve_fd);
    l->reserve_fd = -1;
    int fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd >= 0) close(fd);
  }
  l->backoff_ms = l->backoff_ms ? (l->backoff_ms * 2 > 1000 ? 1000 : l->backoff_ms * 2) : 10;
  uv_poll_stop(&l->poll);
  uv_timer_start(&l->backoff, on_backoff, l->backoff_ms, 0);
}

static void accept_one(lsn *l, int fd) {
  struct ucred uc;
  socklen_t len = sizeof uc;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &len)) {
    log_warn("socket %s: a connection without peer credentials (%s); closed", l->path, strerror(errno));
    close(fd);
    return;
  }
  lsn_peer p = {.uid = uc.uid, .gid = uc.gid, .pid = uc.pid};
  if (conns_live(l) >= l->o.max_conns) {
    if (!l->full)
      log_warn("socket %s: %d connections open (max_connections); closing new ones (the first from uid %u pid %d) "
               "until some close",
               l->path, l->o.max_conns, (unsigned)p.uid, (int)p.pid);
    l->full = 1;
    close(fd);
    return;
  }
  l->full = 0;
  // Once per connection, not per call: the user database is files, or a
  // network service behind NSS.
  p.n_groups = owner_groups(p.uid, p.gid, p.groups, LSN_GROUPS_MAX);
  if (conn_add(l, fd, &p)) {
    log_err("socket %s: out of memory for a connection; closed", l->path);
    close(fd);
    return;
  }
  l->o.conn(l->o.arg, fd);
}

static void on_poll(uv_poll_t *h, int status, int events) {
  (void)events;
  lsn *l = h->data;
  if (status < 0) {
    log_err("socket %s: poll: %s", l->path, uv_strerror(status));
    return;
  }
  // A bounded batch per wakeup: a stream of connections must not starve
  // the loop's other work.
  for (int i = 0; i < 64; i++) {
    int fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      accept_pause(l, errno);
      return;
    }
    if (l->backoff_ms) log_info("socket %s: accepting again", l->path);
    l->backoff_ms = 0;
    reserve_take(l);
    accept_one(l, fd);
  }
}

// The lock that makes the socket path this process's: <path>.lock, holding
// the pid of the daemon that has it.
static int lock_path(lsn *l, char *err, size_t errlen) {
  l->lock_fd = open(l->lock_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (l->lock_fd < 0) {
    snprintf(err, errlen, "socket %s: cannot open its lock %s: %s", l->path, l->lock_path, strerror(errno));
    return -1;
  }
  if (flock(l->lock_fd, LOCK_EX | LOCK_NB)) {
    char pid[32] = "";
    ssize_t n = pread(l->lock_fd, pid, sizeof pid - 1, 0);
    pid[n > 0 ? n : 0] = 0;
    pid[strcspn(pid, "\n")] = 0;
    snprintf(err, errlen, "socket %s: another traind (pid %s) is serving it; refusing to take it over", l->path,
             *pid ? pid : "unknown");
    return -1;
  }
  char pid[32];
  int n = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
  if (ftruncate(l->lock_fd, 0) || pwrite(l->lock_fd, pid, (size_t)n, 0) != n)
    log_warn("socket %s: cannot write the pid into %s: %s", l->path, l->lock_path, strerror(errno));
  return 0;
}

// With the lock held, a socket file still there is a stale one, unless
// something that is not a traind answers on it: that one is left alone.
static int clear_stale(lsn *l, const struct sockaddr_un *sa, char *err, size_t errlen) {
  struct stat st;
  if (lstat(l->path, &st)) return 0;
  if (!S_ISSOCK(st.st_mode)) {
    snprintf(err, errlen, "socket %s: exists and is not a socket; refusing to replace it", l->path);
    return -1;
  }
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int live = fd >= 0 && connect(fd, (const struct sockaddr *)sa, sizeof *sa) == 0;
  if (fd >= 0) close(fd);
  if (live) {
    snprintf(err, errlen, "socket %s: another program is serving it; refusing to replace it", l->path);
    return -1;
  }
  unlink(l->path);
  return 0;
}

static int bind_listen(lsn *l, char *err, size_t errlen) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  if (strlen(l->path) >= sizeof sa.sun_path) {
    snprintf(err, errlen, "socket %s: longer than a socket path may be (%zu bytes)", l->path, sizeof sa.sun_path - 1);
    return -1;
  }
  memcpy(sa.sun_path, l->path, strlen(l->path) + 1);
  if (clear_stale(l, &sa, err, errlen)) return -1;
  l->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (l->fd < 0 || bind(l->fd, (struct sockaddr *)&sa, sizeof sa)) {
    snprintf(err, errlen, "socket %s: cannot listen there: %s", l->path, strerror(errno));
    return -1;
  }
  l->bound = 1;
  if (chmod(l->path, l->o.mode)) {
    snprintf(err, errlen, "socket %s: chmod %o: %s", l->path, l->o.mode, strerror(errno));
    return -1;
  }
  if (listen(l->fd, 128)) {
    snprintf(err, errlen, "socket %s: listen: %s", l->path, strerror(errno));
    return -1;
  }
  return 0;
}

static void lsn_free(lsn *l) {
  if (l->bound) unlink(l->path); // before the lock goes: the path is still ours
  if (l->fd >= 0) close(l->fd);
  if (l->reserve_fd >= 0) close(l->reserve_fd);
  if (l->lock_fd >= 0) close(l->lock_fd); // releases the flock
  free(l->conns);
  free(l->path);
  free(l->lock_path);
  free(l);
}

int lsn_open(lsn **out, uv_loop_t *loop, const lsn_options *o, char *err, size_t errlen) {
  lsn *l = calloc(1, sizeof *l);
  if (!l) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  l->loop = loop;
  l->o = *o;
  l->fd = l->lock_fd = l->reserve_fd = -1;
  l->path = strdup(o->path);
  if (l->path && asprintf(&l->lock_path, "%s.lock", o->path) < 0) l->lock_path = NULL;
  if (!l->path || !l->lock_path) {
    snprintf(err, errlen, "out of memory");
    lsn_free(l);
    return -1;
  }
  *err = 0;
  if (lock_path(l, err, errlen) || bind_listen(l, err, errlen) || uv_poll_init(loop, &l->poll, l->fd)) {
    if (!*err) snprintf(err, errlen, "socket %s: cannot poll it", l->path);
    lsn_free(l);
    return -1;
  }
  uv_timer_init(loop, &l->backoff);
  l->poll.data = l->backoff.data = l;
  reserve_take(l);
  uv_poll_start(&l->poll, UV_READABLE, on_poll);
  *out = l;
  return 0;
}

int lsn_peer_of(lsn *l, int fd, lsn_peer *p) {
  if (fd < 0 || fd >= l->n_conns || !conn_live(&l->conns[fd], fd)) return -1;
  *p = l->conns[fd].peer;
  return 0;
}

static void on_closed(uv_handle_t *h) {
  lsn *l = h->data;
  if (--l->closing) return;
  void (*done)(void *) = l->done;
  void *arg = l->done_arg;
  lsn_free(l);
  if (done) done(arg);
}

void lsn_close(lsn *l, void (*done)(void *arg), void *arg) {
  l->done = done;
  l->done_arg = arg;
  l->closing = 2;
  uv_close((uv_handle_t *)&l->poll, on_closed);
  uv_close((uv_handle_t *)&l->backoff, on_closed);
}
