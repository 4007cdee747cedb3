#include "store/fastlane/client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>

#include "common/mutex.h"
#include "common/random.h"
#include "common/security_keys.h"

namespace sluice::internal::fastlane {

Client::Client(HostPort endpoint, std::chrono::microseconds spin, std::size_t max_idle,
               std::string key)
    : endpoint_(std::move(endpoint)), spin_(spin), key_(std::move(key)), max_idle_(max_idle) {}

Result<Client::Conn> Client::Acquire(std::chrono::milliseconds timeout) {
  {
    MutexLock lock(mu_);
    if (!idle_.empty()) {
      Conn c = std::move(idle_.back());
      idle_.pop_back();
      return c;
    }
  }
  Conn c;
  SLUICE_ASSIGN_OR_RETURN(c.fd, ConnectTcp(endpoint_, timeout));
  SLUICE_RETURN_IF_ERROR(SetIoTimeout(c.fd.get(), timeout));
  SLUICE_RETURN_IF_ERROR(Greet(c, timeout));
  return c;
}

Status Client::Greet(Conn& conn, std::chrono::milliseconds timeout) {
  const int fd = conn.fd.get();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char frame[kHeaderSize + kChallengeBytes];
  SLUICE_RETURN_IF_ERROR(ReadExact(fd, frame, sizeof(frame), false, deadline));
  SLUICE_ASSIGN_OR_RETURN(ResponseHeader h,
                          DecodeResponse(reinterpret_cast<const std::byte*>(frame)));
  if (h.code != 0 || h.body_len != kChallengeBytes) {
    return UnavailableError("fast lane: the master sent no challenge", FailureScope::kEndpoint);
  }
  if (key_.empty()) {
    return Status::Ok();
  }
  // Both ends prove the key over both nonces (frame.h, HelloProof).
  const std::string_view master_nonce(frame + kHeaderSize, kChallengeBytes);
  char hello[kHelloBytes];
  RandomBytes(hello, kChallengeBytes);
  const std::string_view client_nonce(hello, kChallengeBytes);
  const std::array<std::uint8_t, 32> proof = HelloProof(key_, false, master_nonce, client_nonce);
  std::memcpy(hello + kChallengeBytes, proof.data(), proof.size());
  SLUICE_RETURN_IF_ERROR(Write(conn, Method::kHello, 0, std::string_view(hello, sizeof(hello))));
  char head[kHeaderSize];
  SLUICE_RETURN_IF_ERROR(ReadExact(fd, head, kHeaderSize, false, deadline));
  SLUICE_ASSIGN_OR_RETURN(ResponseHeader r,
                          DecodeResponse(reinterpret_cast<const std::byte*>(head)));
  if (r.body_len > 4096) {
    return Status(StatusCode::kUnauthenticated,
                  "fast lane: the master's answer to Hello is too large", FailureScope::kEndpoint);
  }
  std::string answer(r.body_len, '\0');
  SLUICE_RETURN_IF_ERROR(ReadExact(fd, answer.data(), answer.size(), false, deadline));
  if (r.code != 0) {
    return Status(static_cast<StatusCode>(r.code), answer, static_cast<FailureScope>(r.scope));
  }
  const std::array<std::uint8_t, 32> want = HelloProof(key_, true, master_nonce, client_nonce);
  if (!SecureEquals(answer,
                    std::string_view(reinterpret_cast<const char*>(want.data()), want.size()))) {
    return Status(StatusCode::kUnauthenticated,
                  "fast lane: the master did not prove the cluster credential",
                  FailureScope::kEndpoint);
  }
  conn.out = LaneMac(key_, true, master_nonce, client_nonce);
  conn.in = LaneMac(key_, false, master_nonce, client_nonce);
  return Status::Ok();
}

void Client::Release(Conn conn) {
  MutexLock lock(mu_);
  if (idle_.size() < max_idle_) {
    idle_.push_back(std::move(conn));
  }
}

void Client::Reset() {
  MutexLock lock(mu_);
  idle_.clear();
}

bool Client::IdleConnectionAlive() {
  MutexLock lock(mu_);
  if (idle_.empty()) {
    return false;
  }
  // The master sends nothing unasked: any readiness is a close or an error.
  pollfd pfd{idle_.back().fd.get(), POLLIN | POLLRDHUP, 0};
  const int n = ::poll(&pfd, 1, 0);
  if (n != 0) {
    idle_.pop_back();  // Closed (or unusable): drop it.
    return false;
  }
  return true;
}

Status Client::Write(Conn& conn, Method m, std::uint16_t flags, std::string_view body) {
  if (body.size() > kMaxRequestBody) {
    return InvalidArgumentError("fast lane: request too large");
  }
  RequestHeader h;
  h.method = static_cast<std::uint16_t>(m);
  h.flags = flags;
  h.body_len = static_cast<std::uint32_t>(body.size());
  std::byte head[kHeaderSize];
  Encode(h, head);
  return SendHeaderAndBody(conn.fd.get(), head, body, &conn.out);
}

Status Client::ReadExact(int fd, char* p, std::size_t len, bool spin,
                         std::chrono::steady_clock::time_point deadline) {
  using Clock = std::chrono::steady_clock;
  const auto spin_until = spin ? Clock::now() + spin_ : Clock::time_point{};
  while (len > 0) {
    const ssize_t n = ::recv(fd, p, len, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= static_cast<std::size_t>(n);
      continue;
    }
    if (n == 0) {
      return UnavailableError("master closed the fast-lane connection", FailureScope::kEndpoint);
    }
    if (errno == EINTR) {
      continue;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return ErrnoStatus("fast lane recv", errno);
    }
    const auto now = Clock::now();
    if (now < spin_until) {
      continue;
    }
    if (now >= deadline) {
      return DeadlineExceededError("fast lane: no answer in time", FailureScope::kEndpoint);
    }
    pollfd pfd{fd, POLLIN, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    (void)::poll(&pfd, 1, static_cast<int>(left.count()) + 1);
  }
  return Status::Ok();
}

Client::Outcome Client::Call(Method m, std::string_view body, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  Result<Conn> conn = Acquire(timeout);
  if (!conn.ok()) {
    // A refused (or unproved) credential is an answer, not a lane failure.
    return Outcome{conn.status().code() == StatusCode::kUnauthenticated, conn.status()};
  }
  const int fd = conn->fd.get();
  const bool spin = in_flight_.fetch_add(1, std::memory_order_relaxed) == 0;
  Status s = Write(*conn, m, 0, body);
  char head[kHeaderSize];
  if (s.ok()) {
    s = ReadExact(fd, head, kHeaderSize, spin, deadline);
  }
  in_flight_.fetch_sub(1, std::memory_order_relaxed);
  Result<ResponseHeader> h =
      s.ok() ? DecodeResponse(reinterpret_cast<const std::byte*>(head)) : Result<ResponseHeader>(s);
  if (!h.ok()) {
    return Outcome{false, h.status()};
  }
  std::string reply(h->body_len, '\0');
  s = ReadExact(fd, reply.data(), reply.size(), false, deadline);
  if (s.ok() && conn->in.active()) {
    FrameMac mac;
    s = ReadExact(fd, reinterpret_cast<char*>(mac.data()), mac.size(), false, deadline);
    if (s.ok() && !conn->in.CheckNext(reinterpret_cast<const std::byte*>(head), reply, mac)) {
      // Not the master's answer: altered or injected on the way.
      s = UnavailableError("fast lane: an answer failed its integrity check",
                           FailureScope::kEndpoint);
    }
  }
  if (!s.ok()) {
    return Outcome{false, s};
  }
  Release(std::move(*conn));
  if (h->code != 0) {
    return Outcome{
        true, Status(static_cast<StatusCode>(h->code), reply, static_cast<FailureScope>(h->scope))};
  }
  return Outcome{true, std::move(reply)};
}

bool Client::Send(Method m, std::string_view body, std::chrono::milliseconds timeout) {
  Result<Conn> conn = Acquire(timeout);
  if (!conn.ok() || !Write(*conn, m, kFlagOneWay, body).ok()) {
    return false;
  }
  Release(std::move(*conn));
  return true;
}

}  // namespace sluice::internal::fastlane
