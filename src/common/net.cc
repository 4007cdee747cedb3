#include "common/net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include <charconv>

namespace sluice::internal {

std::string HostPort::ToString() const {
  if (host.find(':') != std::string::npos) {
    return "[" + host + "]:" + std::to_string(port);
  }
  return host + ":" + std::to_string(port);
}

Result<HostPort> ParseHostPort(std::string_view text, bool allow_zero_port) {
  const std::string quoted = "'" + std::string(text) + "'";
  HostPort hp;
  std::string_view port_text;
  if (!text.empty() && text.front() == '[') {
    const std::size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return InvalidArgumentError("endpoint " + quoted + " is not [ipv6]:port");
    }
    hp.host = std::string(text.substr(1, close - 1));
    port_text = text.substr(close + 2);
  } else {
    const std::size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) {
      return InvalidArgumentError("endpoint " + quoted + " has no ':port'");
    }
    hp.host = std::string(text.substr(0, colon));
    if (hp.host.find(':') != std::string::npos) {
      return InvalidArgumentError("endpoint " + quoted + ": put IPv6 addresses in brackets");
    }
    port_text = text.substr(colon + 1);
  }
  if (hp.host.empty()) {
    return InvalidArgumentError("endpoint " + quoted + " has an empty host");
  }
  unsigned port = 0;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || port > 65535) {
    return InvalidArgumentError("endpoint " + quoted + " has a bad port (want 0-65535)");
  }
  if (port == 0 && !allow_zero_port) {
    return InvalidArgumentError("endpoint " + quoted + " needs a non-zero port");
  }
  hp.port = static_cast<std::uint16_t>(port);
  return hp;
}

UniqueFd& UniqueFd::operator=(UniqueFd&& o) noexcept {
  if (this != &o) {
    reset(o.release());
  }
  return *this;
}

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) {
    ::close(fd_);
  }
  fd_ = fd;
}

Status ErrnoStatus(std::string_view what, int err, FailureScope scope) {
  return UnavailableError(std::string(what) + ": " + strerror(err), scope);
}

namespace {

struct AddrInfoDeleter {
  void operator()(addrinfo* ai) const { freeaddrinfo(ai); }
};

Result<std::unique_ptr<addrinfo, AddrInfoDeleter>> Resolve(const HostPort& hp, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(hp.port);
  const int rc = getaddrinfo(hp.host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) {
    return InvalidArgumentError("cannot resolve '" + hp.host + "': " + gai_strerror(rc));
  }
  return std::unique_ptr<addrinfo, AddrInfoDeleter>(res);
}

}  // namespace

bool IsWildcardHost(std::string_view host) {
  return host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]";
}

Result<std::string> AdvertisedEndpoint(const HostPort& bound, std::string_view advertise,
                                       std::string_view what) {
  const std::string name(what);
  if (advertise.empty()) {
    if (IsWildcardHost(bound.host)) {
      return InvalidArgumentError(name + ": listening on " + bound.ToString() +
                                  " (every address) needs an address peers can dial "
                                  "(give the advertise address)");
    }
    return bound.ToString();
  }
  HostPort hp;
  const bool bare_v6 = advertise.front() != '[' &&
                       advertise.find(':') != advertise.rfind(':');  // Two colons: no port.
  if (bare_v6 || advertise.find(':') == std::string_view::npos ||
      (advertise.front() == '[' && advertise.back() == ']')) {
    hp.host = std::string(advertise.front() == '[' ? advertise.substr(1, advertise.size() - 2)
                                                   : advertise);
  } else {
    Result<HostPort> parsed = ParseHostPort(advertise, /*allow_zero_port=*/true);
    if (!parsed.ok()) {
      return InvalidArgumentError(name + ": " + std::string(parsed.status().message()));
    }
    hp = std::move(*parsed);
  }
  if (IsWildcardHost(hp.host) || hp.host.find_first_of(" /[]") != std::string::npos) {
    return InvalidArgumentError(name + ": '" + std::string(advertise) +
                                "' is not an address peers can dial");
  }
  if (hp.port == 0) {
    hp.port = bound.port;
  }
  return hp.ToString();
}

Result<UniqueFd> Listen(const HostPort& hp, std::uint16_t* bound_port) {
  SLUICE_ASSIGN_OR_RETURN(auto ai, Resolve(hp, true));
  UniqueFd fd(::socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) {
    return ErrnoStatus("socket", errno, FailureScope::kTransport);
  }
  const int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
    return ErrnoStatus("bind " + hp.ToString(), errno, FailureScope::kTransport);
  }
  // The largest accept queue the kernel allows (it caps this at
  // net.core.somaxconn): a burst of connects past a full queue is dropped
  // by the kernel before the acceptor can refuse it with a reason.
  if (::listen(fd.get(), SOMAXCONN) != 0) {
    return ErrnoStatus("listen " + hp.ToString(), errno, FailureScope::kTransport);
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len);
  *bound_port = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                               : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return fd;
}

std::string PeerAddress(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  char text[INET6_ADDRSTRLEN] = {};
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    return "unknown peer";
  }
  HostPort hp;
  if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof(text));
    hp.port = ntohs(a->sin6_port);
  } else if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &a->sin_addr, text, sizeof(text));
    hp.port = ntohs(a->sin_port);
  } else {
    return "unknown peer";
  }
  hp.host = text;
  return hp.ToString();
}

Result<UniqueFd> ConnectTcp(const HostPort& hp, std::chrono::milliseconds timeout) {
  SLUICE_ASSIGN_OR_RETURN(auto ai, Resolve(hp, false));
  Status last = UnavailableError("no address for " + hp.ToString(), FailureScope::kEndpoint);
  for (addrinfo* a = ai.get(); a != nullptr; a = a->ai_next) {
    UniqueFd fd(::socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd.valid()) {
      last = ErrnoStatus("socket", errno, FailureScope::kTransport);
      continue;
    }
    if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      last = ErrnoStatus("connect " + hp.ToString(), errno);
      continue;
    }
    pollfd p{fd.get(), POLLOUT, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(timeout.count()));
    if (rc == 0) {
      last = DeadlineExceededError("connect " + hp.ToString() + " timed out after " +
                                       std::to_string(timeout.count()) + " ms",
                                   FailureScope::kEndpoint);
      continue;
    }
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (rc < 0 || err != 0) {
      last = ErrnoStatus("connect " + hp.ToString(), rc < 0 ? errno : err);
      continue;
    }
    const int one = 1;
    ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    SLUICE_RETURN_IF_ERROR(SetNonBlocking(fd.get(), false));
    return fd;
  }
  return last;
}

Status SetNonBlocking(int fd, bool on) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  flags = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  if (::fcntl(fd, F_SETFL, flags) != 0) {
    return ErrnoStatus("fcntl", errno, FailureScope::kTransport);
  }
  return Status::Ok();
}

Status SetIoTimeout(int fd, std::chrono::milliseconds timeout) {
  timeval tv{};
  tv.tv_sec = timeout.count() / 1000;
  tv.tv_usec = (timeout.count() % 1000) * 1000;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  return Status::Ok();
}

Status SendAll(int fd, const void* data, std::size_t len) {
  const char* p = static_cast<const char*>(data);
  while (len > 0) {
    const ssize_t n = ::send(fd, p, len, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return DeadlineExceededError("send timed out", FailureScope::kEndpoint);
      }
      return ErrnoStatus("send", errno);
    }
    p += n;
    len -= static_cast<std::size_t>(n);
  }
  return Status::Ok();
}

Status RecvAll(int fd, void* data, std::size_t len) {
  char* p = static_cast<char*>(data);
  while (len > 0) {
    const ssize_t n = ::recv(fd, p, len, 0);
    if (n == 0) {
      return UnavailableError("peer closed the connection", FailureScope::kEndpoint);
    }
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return DeadlineExceededError("receive timed out", FailureScope::kEndpoint);
      }
      return ErrnoStatus("recv", errno);
    }
    p += n;
    len -= static_cast<std::size_t>(n);
  }
  return Status::Ok();
}

}  // namespace sluice::internal
