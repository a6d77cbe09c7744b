// The Unix socket's listener (DESIGN §5): the daemon accepts its local
// connections itself and hands each to the gRPC core
// (grpc_server_add_channel_from_fd), because the core's own listener cannot
// do what a service needs:
//   - a lock on the socket path (<path>.lock, flock): a second daemon is
//     refused by name and never unlinks a live socket;
//   - accept that survives running out of descriptors (EMFILE): a reserve
//     descriptor turns the waiting client away, accepting pauses with a
//     backoff and resumes by itself (the core's listener stops for good);
//   - a limit on open connections;
//   - the peer's credentials (SO_PEERCRED), the caller's identity, with its
//     user's groups looked up once, when it connects.
// (A connection whose client keeps cancelling its calls is closed by the
// server's completion-queue thread: rapid.h.)
// TCP (TLS) stays on the core's listener. Loop thread only.
#ifndef TRAIND_LISTEN_H
#define TRAIND_LISTEN_H

#include <sys/types.h>
#include <uv.h>

typedef struct lsn lsn;

enum { LSN_GROUPS_MAX = 64 };

typedef struct lsn_peer {
  uid_t uid;
  gid_t gid;
  pid_t pid;
  int n_groups;                  // the supplementary groups of uid's user (owner_groups)
  gid_t groups[LSN_GROUPS_MAX];
} lsn_peer;

typedef struct lsn_options {
  const char *path;  // the socket file
  unsigned mode;     // its mode (chmod after bind: the process umask does not decide it)
  int max_conns;     // open connections at most; more are closed at once
  void (*conn)(void *arg, int fd); // a new connection: the callee owns fd
  void *arg;
} lsn_options;

// Locks the path, replaces a stale socket file, binds, listens and starts
// accepting. Fills err (naming the path and, for a held lock, the pid that
// holds it) on failure.
int lsn_open(lsn **out, uv_loop_t *loop, const lsn_options *o, char *err, size_t errlen);
// The credentials of the connection on fd, taken when it was accepted.
// -1 when fd is not one of this listener's live connections.
int lsn_peer_of(lsn *l, int fd, lsn_peer *p);
// Stops accepting, removes the socket file and releases the lock; done runs
// once the handles are closed (l is freed by then).
void lsn_close(lsn *l, void (*done)(void *arg), void *arg);

#endif
