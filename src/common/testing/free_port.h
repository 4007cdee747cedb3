// For tests: a loopback TCP port free now (bound, read back, released), so
// a process can be started, and restarted, on a port known in advance.
#ifndef SLUICE_COMMON_TESTING_FREE_PORT_H_
#define SLUICE_COMMON_TESTING_FREE_PORT_H_

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <random>
#include <string>

namespace sluice::internal {

// Whether `port` (0: any) can be bound on loopback now; the port bound.
inline int BindLoopbackPort(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  socklen_t len = sizeof(a);
  int bound = -1;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    bound = ntohs(a.sin_port);
  }
  if (fd >= 0) {
    ::close(fd);
  }
  return bound;
}

// The port, or -1 when none could be bound. Drawn at random below the
// kernel's ephemeral range (ip_local_port_range), so that no other
// process's outgoing connection or listen-on-0 takes it while the process
// it is for restarts on it (CI once failed a master's restart with
// "Address already in use": a port-0 port, reused in between). Only
// another caller of this may draw the same port; each draw is checked
// with a bind. Falls back to a port-0 port when the range leaves no room.
inline int FreeLoopbackPort() {
  int low = 32768;
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  range >> low;
  constexpr int kFirst = 10000;
  if (low - kFirst >= 1000) {
    std::mt19937 rng(std::random_device{}());
    std::uniform_int_distribution<int> pick(kFirst, low - 1);
    for (int i = 0; i < 64; ++i) {
      const int port = BindLoopbackPort(pick(rng));
      if (port > 0) {
        return port;
      }
    }
  }
  return BindLoopbackPort(0);
}

// "127.0.0.1:PORT" for a FreeLoopbackPort port.
inline std::string FreeLoopbackEndpoint() {
  return "127.0.0.1:" + std::to_string(FreeLoopbackPort());
}

}  // namespace sluice::internal

#endif  // SLUICE_COMMON_TESTING_FREE_PORT_H_
