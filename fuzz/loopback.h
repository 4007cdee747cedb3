// Shared by the fuzz targets that drive a live server in this process over
// loopback connections (engine_conn_fuzz, http_server_fuzz).
#ifndef SLUICE_FUZZ_LOOPBACK_H_
#define SLUICE_FUZZ_LOOPBACK_H_

#include <poll.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdlib>
#include <string>

namespace sluice::fuzz {

// Reads what the server answers on `fd` until it closes or is quiet twice
// for `quiet_ms`; returns the first bytes of it (at least 64 when there
// were that many).
inline std::string DrainAnswer(int fd, int quiet_ms) {
  std::string head;
  char buf[4096];
  for (int quiet = 0; quiet < 2;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, quiet_ms) <= 0) {
      ++quiet;
      continue;
    }
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      break;
    }
    if (head.size() < 64) {
      head.append(buf, static_cast<std::size_t>(n));
    }
  }
  return head;
}

// Deletes `*owner` at exit, before static destructors run: a live server's
// threads log through spdlog, whose registry is one of them. One owner per
// type T.
template <typename T>
void DeleteAtExit(T*& owner) {
  static T** slot = &owner;
  std::atexit([] {
    delete *slot;
    *slot = nullptr;
  });
}

}  // namespace sluice::fuzz

#endif  // SLUICE_FUZZ_LOOPBACK_H_
