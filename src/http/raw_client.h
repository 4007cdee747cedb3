// A blocking HTTP/1.1 client on a raw socket: the caller controls every
// byte it sends (partial headers, declared-but-unsent bodies, pipelining)
// and sees exactly how the server answers or closes. `sluice bench http`
// holds thousands of idle, streaming and waiting connections with it; the
// HTTP tests send malformed requests with it.
#ifndef SLUICE_HTTP_RAW_CLIENT_H_
#define SLUICE_HTTP_RAW_CLIENT_H_

#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <string>
#include <string_view>

#include "common/net.h"

namespace sluice::http::raw {

struct Reply {
  int status = 0;  // 0: the connection closed without an answer.
  std::string head;
  std::string body;
  bool closed = false;  // The server closed the connection after it.
};

class Conn {
 public:
  explicit Conn(const std::string& endpoint,
                std::chrono::milliseconds io_timeout = std::chrono::seconds(5)) {
    auto hp = sluice::internal::ParseHostPort(endpoint, false);
    auto fd = hp.ok() ? sluice::internal::ConnectTcp(*hp, std::chrono::seconds(2))
                      : Result<sluice::internal::UniqueFd>(hp.status());
    if (fd.ok() && sluice::internal::SetIoTimeout(fd->get(), io_timeout).ok()) {
      fd_ = std::move(*fd);
    }
  }
  // Whether the connection was made (else every Send fails).
  bool connected() const { return fd_.valid(); }
  bool Send(std::string_view s) {
    return ::send(fd_.get(), s.data(), s.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(s.size());
  }
  // Reads one answer (Content-Length or chunked body).
  Reply Read() {
    Reply r;
    std::size_t end;
    while ((end = in_.find("\r\n\r\n")) == std::string::npos) {
      if (!Fill()) {
        r.closed = true;
        return r;
      }
    }
    r.head = in_.substr(0, end + 4);
    in_.erase(0, end + 4);
    r.status = std::stoi(r.head.substr(9, 3));
    const std::string lower = [&] {
      std::string l = r.head;
      for (char& c : l) {
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      }
      return l;
    }();
    if (lower.find("transfer-encoding: chunked") != std::string::npos) {
      while (true) {
        std::size_t eol;
        while ((eol = in_.find("\r\n")) == std::string::npos) {
          if (!Fill()) {
            r.closed = true;
            return r;
          }
        }
        const std::size_t n = std::stoul(in_.substr(0, eol), nullptr, 16);
        while (in_.size() < eol + 2 + n + 2) {
          if (!Fill()) {
            r.closed = true;
            return r;
          }
        }
        r.body += in_.substr(eol + 2, n);
        in_.erase(0, eol + 2 + n + 2);
        if (n == 0) {
          break;
        }
      }
    } else {
      const std::size_t cl = lower.find("content-length: ");
      const std::size_t n = cl == std::string::npos ? 0 : std::stoul(lower.substr(cl + 16));
      while (in_.size() < n) {
        if (!Fill()) {
          r.closed = true;
          return r;
        }
      }
      r.body = in_.substr(0, n);
      in_.erase(0, n);
    }
    r.closed = lower.find("connection: close") != std::string::npos;
    return r;
  }
  // Reads until `marker` has arrived; returns everything up to and
  // including it (consumed), or "" if the connection closed or timed out
  // first.
  std::string ReadUntil(std::string_view marker) {
    std::size_t at;
    while ((at = in_.find(marker)) == std::string::npos) {
      if (!Fill()) {
        return {};
      }
    }
    std::string out = in_.substr(0, at + marker.size());
    in_.erase(0, at + marker.size());
    return out;
  }
  // Whether the server closed the connection (EOF or reset) within the
  // socket's I/O timeout, with nothing more sent.
  bool ClosedByServer() {
    char c;
    const ssize_t n = ::recv(fd_.get(), &c, 1, 0);
    return n == 0 || (n < 0 && errno == ECONNRESET);
  }
  void Close() { fd_.reset(); }

 private:
  bool Fill() {
    char buf[65536];
    const ssize_t n = ::recv(fd_.get(), buf, sizeof(buf), 0);
    if (n <= 0) {
      return false;
    }
    in_.append(buf, static_cast<std::size_t>(n));
    return true;
  }
  sluice::internal::UniqueFd fd_;
  std::string in_;
};

}  // namespace sluice::http::raw

#endif  // SLUICE_HTTP_RAW_CLIENT_H_
