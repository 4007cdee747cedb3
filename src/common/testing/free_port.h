// For tests: a loopback TCP port free now (bound, read back, released), so
// a process can be started, and restarted, on a port known in advance.
#ifndef SLUICE_COMMON_TESTING_FREE_PORT_H_
#define SLUICE_COMMON_TESTING_FREE_PORT_H_

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace sluice::internal {

// The port, or -1 when none could be bound.
inline int FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

}  // namespace sluice::internal

#endif  // SLUICE_COMMON_TESTING_FREE_PORT_H_
