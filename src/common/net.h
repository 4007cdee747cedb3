// Socket helpers shared by every component that speaks TCP: endpoint
// parsing, listening, connecting with a deadline, and blocking exact-length
// I/O used by handshakes. Data paths use their own non-blocking loops.
#ifndef SLUICE_COMMON_NET_H_
#define SLUICE_COMMON_NET_H_

#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "sluice/status.h"

namespace sluice::internal {

struct HostPort {
  std::string host;  // Name or literal address, without IPv6 brackets.
  std::uint16_t port = 0;

  // "host:port", with brackets around IPv6 literals.
  std::string ToString() const;
};

// Parses "host:port", "[v6addr]:port". Port 0 is allowed only if
// `allow_zero_port` (a listener asking the kernel to pick one).
// Errors: kInvalidArgument naming what is wrong with `text`.
Result<HostPort> ParseHostPort(std::string_view text, bool allow_zero_port);

// Whether `host` is a wildcard address (0.0.0.0, ::, or empty): a listener
// bound there cannot be dialed under that name.
bool IsWildcardHost(std::string_view host);

// What peers dial for a listener bound at `bound` (its real port):
// `advertise` is "host", "host:port", "[v6]" or "[v6]:port" (a missing or
// zero port is the bound one), or empty for the bound endpoint itself.
// Errors: kInvalidArgument naming `what` (the flag) when `advertise` is
// malformed or a wildcard, or when it is empty and `bound` is a wildcard
// (peers could not dial it).
Result<std::string> AdvertisedEndpoint(const HostPort& bound, std::string_view advertise,
                                       std::string_view what);

// Owns a file descriptor; closes it on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// Binds and listens on `hp` (port 0 picks one); the bound port is written to
// `bound_port`. The socket is non-blocking and close-on-exec.
// Errors: kInvalidArgument (unresolvable host), kUnavailable (bind/listen).
Result<UniqueFd> Listen(const HostPort& hp, std::uint16_t* bound_port);

// Connects a blocking TCP socket within `timeout`, with TCP_NODELAY set.
// Errors: kUnavailable (scope kEndpoint) when the peer refuses or is
// unreachable; kDeadlineExceeded (scope kEndpoint) on timeout.
Result<UniqueFd> ConnectTcp(const HostPort& hp, std::chrono::milliseconds timeout);

// Blocking exact-length I/O on a socket with SO_RCVTIMEO/SO_SNDTIMEO set by
// SetIoTimeout. Errors carry scope kEndpoint.
Status SendAll(int fd, const void* data, std::size_t len);
Status RecvAll(int fd, void* data, std::size_t len);
Status SetIoTimeout(int fd, std::chrono::milliseconds timeout);
Status SetNonBlocking(int fd, bool on);

// The connected peer of `fd` as "host:port" (brackets around IPv6), for
// logs; "unknown peer" when the socket has none.
std::string PeerAddress(int fd);

// Returns "Unavailable"-coded status from errno with `what` as context.
Status ErrnoStatus(std::string_view what, int err, FailureScope scope = FailureScope::kEndpoint);

}  // namespace sluice::internal

#endif  // SLUICE_COMMON_NET_H_
