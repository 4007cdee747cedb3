#include "bench/socket_baseline.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>

namespace sluice::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct BaselineHello {
  std::uint32_t target_sends = 0;  // 1: the target streams to the client (read).
  std::uint32_t pad = 0;
  std::uint64_t block = 0;
  std::uint64_t duration_ms = 0;
};

bool SendAllBlocking(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k <= 0) {
      return false;
    }
    p += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

bool RecvAllBlocking(int fd, char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t k = ::recv(fd, p, n, 0);
    if (k <= 0) {
      return false;
    }
    p += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

}  // namespace

void ServeSocketBaseline(int listen_fd, char* region, std::uint64_t region_size) {
  while (true) {
    const int fd = ::accept(listen_fd, nullptr, nullptr);
    if (fd < 0) {
      return;
    }
    BaselineHello h;
    if (RecvAllBlocking(fd, reinterpret_cast<char*>(&h), sizeof(h)) && h.block > 0 &&
        h.block <= region_size) {
      if (h.target_sends != 0) {
        const auto end = Clock::now() + std::chrono::milliseconds(h.duration_ms);
        while (Clock::now() < end && SendAllBlocking(fd, region, h.block)) {
        }
      } else {
        std::uint64_t total = 0;
        while (true) {
          const ssize_t k = ::recv(fd, region + total % h.block, h.block - total % h.block, 0);
          if (k <= 0) {
            break;
          }
          total += static_cast<std::uint64_t>(k);
        }
        SendAllBlocking(fd, reinterpret_cast<char*>(&total), sizeof(total));
      }
    }
    ::close(fd);
  }
}

Result<double> SocketBaselineGbps(const std::string& address, std::uint16_t port, bool target_sends,
                                  std::uint64_t block, double duration_s, char* buf) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (::inet_pton(AF_INET, address.c_str(), &addr.sin_addr) != 1) {
    return InvalidArgumentError("--target-address '" + address + "' is not an IPv4 address");
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return UnavailableError("baseline connect failed", FailureScope::kEndpoint);
  }
  BaselineHello h;
  h.target_sends = target_sends ? 1 : 0;
  h.block = block;
  h.duration_ms = static_cast<std::uint64_t>(duration_s * 1000);
  SendAllBlocking(fd, reinterpret_cast<char*>(&h), sizeof(h));
  std::uint64_t bytes = 0;
  const auto start = Clock::now();
  if (target_sends) {
    while (true) {
      const ssize_t k = ::recv(fd, buf + bytes % block, block - bytes % block, 0);
      if (k <= 0) {
        break;
      }
      bytes += static_cast<std::uint64_t>(k);
    }
  } else {
    const auto end = start + std::chrono::duration<double>(duration_s);
    while (Clock::now() < end && SendAllBlocking(fd, buf, block)) {
    }
    ::shutdown(fd, SHUT_WR);
    RecvAllBlocking(fd, reinterpret_cast<char*>(&bytes), sizeof(bytes));
  }
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  ::close(fd);
  return static_cast<double>(bytes) / secs / 1e9;
}

}  // namespace sluice::bench
