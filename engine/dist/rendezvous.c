// TCP rendezvous (rendezvous.h). A rank's request: "TRDZ", the world size
// and its rank, as big-endian 32-bit numbers. Rank 0's answer: a status
// byte, then the blob (status 0) or a reason ending the connection.
#define _GNU_SOURCE
#include "dist/rendezvous.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { HELLO_BYTES = 12 };

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int ms_left(double deadline) {
  double s = deadline - mono_s();
  return s <= 0 ? 0 : s > 3600 ? 3600000 : (int)(s * 1000) + 1;
}

// All n bytes in or out of fd before the deadline; -1 otherwise (errno:
// ETIMEDOUT, or the socket's error; EPIPE for an early end).
static int io_all(int fd, void *buf, size_t n, int out, double deadline) {
  char *p = buf;
  while (n) {
    struct pollfd pf = {fd, out ? POLLOUT : POLLIN, 0};
    int rc = poll(&pf, 1, ms_left(deadline));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) {
      if (rc == 0) errno = ETIMEDOUT;
      return -1;
    }
    ssize_t k = out ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k <= 0) {
      if (k == 0) errno = EPIPE;
      return -1;
    }
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

static void put32(unsigned char *p, uint32_t v) {
  uint32_t be = htonl(v);
  memcpy(p, &be, 4);
}

static uint32_t get32(const unsigned char *p) {
  uint32_t be;
  memcpy(&be, p, 4);
  return ntohl(be);
}

static int serve(const eng_dist_env *env, const void *blob, size_t n, int wait_s, eng_err *e) {
  char port[16];
  snprintf(port, sizeof port, "%d", env->master_port);
  int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int v6 = fd >= 0;
  if (!v6) fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return eng_err_set(e, ENG_EIO, "rendezvous: socket: %s", strerror(errno));
  int one = 1, zero = 0;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (v6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero); // IPv4 peers too
  struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)env->master_port),
                            .sin6_addr = in6addr_any};
  struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)env->master_port),
                           .sin_addr.s_addr = htonl(INADDR_ANY)};
  if ((v6 ? bind(fd, (struct sockaddr *)&a6, sizeof a6) : bind(fd, (struct sockaddr *)&a4, sizeof a4)) ||
      listen(fd, env->world)) {
    int err = errno;
    close(fd);
    return eng_err_set(e, ENG_EIO, "rendezvous: rank 0 cannot listen on port %s (MASTER_PORT): %s", port,
                       strerror(err));
  }
  char *served = calloc((size_t)env->world, 1);
  unsigned char *answer = malloc(1 + n);
  if (!served || !answer) {
    free(served);
    free(answer);
    close(fd);
    return eng_err_set(e, ENG_ENOMEM, "rendezvous: out of memory");
  }
  answer[0] = 0;
  memcpy(answer + 1, blob, n);
  double deadline = mono_s() + wait_s;
  int left = env->world - 1, rc = 0;
  while (left > 0) {
    struct pollfd pf = {fd, POLLIN, 0};
    int p = poll(&pf, 1, ms_left(deadline));
    if (p < 0 && errno == EINTR) continue;
    if (p <= 0) {
      int missing = -1;
      for (int r = 1; r < env->world && missing < 0; r++)
        if (!served[r]) missing = r;
      rc = eng_err_set(e, ENG_EIO, "rendezvous: %d of %d ranks did not reach rank 0 on port %s within %d s "
                       "(rank %d among them)", left, env->world - 1, port, wait_s, missing);
      break;
    }
    int c = accept4(fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (c < 0) continue; // the peer left already, or a transient error: keep waiting
    // A peer that says nothing is dropped after a few seconds, not waited on.
    double peer_deadline = mono_s() + 5 < deadline ? mono_s() + 5 : deadline;
    unsigned char hello[HELLO_BYTES];
    if (io_all(c, hello, sizeof hello, 0, peer_deadline) == 0 && !memcmp(hello, "TRDZ", 4)) {
      uint32_t world = get32(hello + 4), rank = get32(hello + 8);
      char why[160] = "";
      if (world != (uint32_t)env->world)
        snprintf(why, sizeof why, "world size %u, rank 0's is %d", world, env->world);
      else if (rank == 0 || rank >= world)
        snprintf(why, sizeof why, "rank %u is not one of ranks 1..%d", rank, env->world - 1);
      else if (served[rank])
        snprintf(why, sizeof why, "rank %u came twice", rank);
      if (*why) {
        unsigned char no = 1;
        if (!io_all(c, &no, 1, 1, peer_deadline)) io_all(c, why, strlen(why), 1, peer_deadline);
      } else if (io_all(c, answer, 1 + n, 1, peer_deadline) == 0) {
        served[rank] = 1;
        left--;
      }
    }
    close(c);
  }
  free(served);
  free(answer);
  close(fd);
  return rc;
}

// One attempt at every address of MASTER_ADDR, none past the deadline (an
// unroutable address would hold a blocking connect for minutes): a
// connected, non-blocking socket, or -1 with errno.
static int dial(const struct addrinfo *ai, double deadline) {
  int err = ECONNREFUSED;
  for (; ai; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) continue;
    int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc && errno == EINPROGRESS) {
      struct pollfd pf = {fd, POLLOUT, 0};
      int p;
      while ((p = poll(&pf, 1, ms_left(deadline))) < 0 && errno == EINTR) {
      }
      socklen_t len = sizeof err;
      if (p == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) return fd;
      if (p == 0) err = ETIMEDOUT;
    } else if (rc == 0) {
      return fd;
    } else {
      err = errno;
    }
    close(fd);
  }
  errno = err;
  return -1;
}

static int ask(const eng_dist_env *env, void *blob, size_t n, int wait_s, eng_err *e) {
  char port[16];
  snprintf(port, sizeof port, "%d", env->master_port);
  const char *host = env->master_addr;
  double deadline = mono_s() + wait_s;
  int backoff_ms = 50, fd = -1;
  char last[160] = "not tried";
  while (fd < 0) {
    // Looked up again each time: a pod's DNS name appears only once the pod runs.
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    int g = getaddrinfo(host, port, &hints, &ai);
    if (g) snprintf(last, sizeof last, "%s", gai_strerror(g));
    else {
      fd = dial(ai, deadline);
      if (fd < 0) snprintf(last, sizeof last, "%s", strerror(errno));
      freeaddrinfo(ai);
    }
    if (fd >= 0) break;
    if (mono_s() + backoff_ms / 1000.0 >= deadline)
      return eng_err_set(e, ENG_EIO, "rendezvous: rank %d found no rank 0 at %s:%s (MASTER_ADDR:MASTER_PORT) within "
                         "%d s: %s", env->rank, host, port, wait_s, last);
    usleep((useconds_t)backoff_ms * 1000);
    backoff_ms = backoff_ms * 2 > 1000 ? 1000 : backoff_ms * 2;
  }
  unsigned char hello[HELLO_BYTES], status;
  memcpy(hello, "TRDZ", 4);
  put32(hello + 4, (uint32_t)env->world);
  put32(hello + 8, (uint32_t)env->rank);
  int rc = 0;
  if (io_all(fd, hello, sizeof hello, 1, deadline) || io_all(fd, &status, 1, 0, deadline)) {
    rc = eng_err_set(e, ENG_EIO, "rendezvous: rank %d with rank 0 at %s:%s: %s", env->rank, host, port,
                     strerror(errno));
  } else if (status != 0) {
    char why[161] = "";
    size_t k = 0; // the reason, up to rank 0's close
    for (ssize_t got; k < sizeof why - 1; k += (size_t)got) {
      struct pollfd pf = {fd, POLLIN, 0};
      if (poll(&pf, 1, ms_left(deadline)) != 1 || (got = recv(fd, why + k, sizeof why - 1 - k, 0)) <= 0) break;
    }
    why[k] = '\0';
    rc = eng_err_set(e, ENG_EIO, "rendezvous: rank 0 at %s:%s refused rank %d: %s", host, port, env->rank, why);
  } else if (io_all(fd, blob, n, 0, deadline)) {
    rc = eng_err_set(e, ENG_EIO, "rendezvous: rank %d reading from rank 0 at %s:%s: %s", env->rank, host, port,
                     strerror(errno));
  }
  close(fd);
  return rc;
}

int eng_dist_rendezvous(const eng_dist_env *env, void *blob, size_t n, int wait_s, eng_err *e) {
  if (env->world <= 1) return ENG_OK;
  if (!env->master_port || (env->rank > 0 && !env->master_addr[0]))
    return eng_err_set(e, ENG_EINVAL, "rendezvous: MASTER_ADDR and MASTER_PORT are needed for %d ranks",
                       env->world);
  return env->rank == 0 ? serve(env, blob, n, wait_s, e) : ask(env, blob, n, wait_s, e);
}
