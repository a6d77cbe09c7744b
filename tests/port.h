// A TCP port on loopback that nobody listens on now: the kernel's pick for a
// socket bound and closed at once (a later bind by someone else could take
// it, which the tests that use it would see as a failure to listen).
#ifndef TESTS_PORT_H
#define TESTS_PORT_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"

static inline int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0,
        "cannot find a free port");
  close(fd);
  return ntohs(a.sin_port);
}

#endif
