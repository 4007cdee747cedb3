#include "store/fastlane/server.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <vector>

#include "common/log.h"
#include "common/mutex.h"
#include "common/random.h"

namespace sluice::internal::fastlane {
namespace {

// A request's body must follow its header within this long.
constexpr std::chrono::seconds kBodyTimeout{10};

// Waits until `fd` is readable or closed; false when it was shut down.
bool WaitReadable(int fd) {
  pollfd p{fd, POLLIN, 0};
  while (true) {
    const int n = ::poll(&p, 1, -1);
    if (n > 0) {
      return true;  // Readable, or an error/hang-up the next recv reports.
    }
    if (n < 0 && errno != EINTR) {
      return false;
    }
  }
}

// Reads exactly `len` bytes by `deadline` however the peer trickles them.
bool RecvBy(int fd, void* out, std::size_t len, std::chrono::steady_clock::time_point deadline) {
  auto* p = static_cast<char*>(out);
  while (len > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return false;
    }
    pollfd pfd{fd, POLLIN, 0};
    const int n = ::poll(&pfd, 1, static_cast<int>(left.count()));
    if (n < 0 && errno != EINTR) {
      return false;
    }
    if (n <= 0) {
      continue;
    }
    const ssize_t got = ::recv(fd, p, len, MSG_DONTWAIT);
    if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      return false;
    }
    if (got > 0) {
      p += got;
      len -= static_cast<std::size_t>(got);
    }
  }
  return true;
}

std::string_view Bytes(const std::uint8_t* p, std::size_t n) {
  return {reinterpret_cast<const char*>(p), n};
}

Status SendFrame(int fd, const ResponseHeader& h, std::string_view body, LaneMac* mac = nullptr) {
  std::byte head[kHeaderSize];
  Encode(h, head);
  return SendHeaderAndBody(fd, head, body, mac);
}

}  // namespace

// The socket stays open while any Responder holds it (its number is never
// reused under a late answer); the serving thread shuts it down on exit, so
// late answers fail quietly.
struct Responder::Conn {
  explicit Conn(UniqueFd f) : fd(std::move(f)) {}
  UniqueFd fd;
  Mutex write_mu;                           // One frame at a time.
  LaneMac out SLUICE_GUARDED_BY(write_mu);  // Active once the Hello proved the key.
};

Responder::Responder(std::shared_ptr<Conn> conn, bool one_way)
    : conn_(std::move(conn)), one_way_(one_way) {}

void Responder::operator()(const Result<std::string>& out) {
  if (one_way_ || answered_) {
    return;
  }
  answered_ = true;
  ResponseHeader r;
  std::string_view reply;
  std::string error;
  if (out.ok()) {
    reply = *out;
  } else {
    r.code = static_cast<std::uint8_t>(out.status().code());
    r.scope = static_cast<std::uint8_t>(out.status().scope());
    error = std::string(out.status().message());
    reply = error;
  }
  if (reply.size() > kMaxResponseBody) {
    r = ResponseHeader{};
    r.code = static_cast<std::uint8_t>(StatusCode::kInternal);
    error = "fast lane: response too large";
    reply = error;
  }
  r.body_len = static_cast<std::uint32_t>(reply.size());
  MutexLock lock(conn_->write_mu);
  if (!SendFrame(conn_->fd.get(), r, reply, &conn_->out).ok()) {
    ::shutdown(conn_->fd.get(), SHUT_RDWR);  // Its serving thread ends the connection.
  }
}

Server::Server(Handler handler, ServerLimits limits, std::string key)
    : handler_(std::move(handler)), limits_(limits), key_(std::move(key)) {}

Result<std::unique_ptr<Server>> Server::Start(const HostPort& listen, Handler handler,
                                              ServerLimits limits, std::string key) {
  if (limits.max_connections == 0 || limits.max_pending_handshakes == 0 ||
      limits.handshake_timeout.count() <= 0) {
    return InvalidArgumentError(
        "fast lane: max_connections, max_pending_handshakes and handshake_timeout must be "
        "positive");
  }
  std::unique_ptr<Server> s(new Server(std::move(handler), limits, std::move(key)));
  std::uint16_t port = 0;
  SLUICE_ASSIGN_OR_RETURN(s->listener_, Listen(listen, &port));
  s->wake_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!s->wake_.valid()) {
    return ErrnoStatus("fast lane eventfd", errno, FailureScope::kTransport);
  }
  HostPort bound = listen;
  bound.port = port;
  s->endpoint_ = bound.ToString();
  s->acceptor_ = std::thread([p = s.get()] { p->AcceptLoop(); });
  return s;
}

Server::~Server() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
    for (Conn& c : conns_) {
      if (!c.done) {
        ::shutdown(c.io->fd.get(), SHUT_RDWR);  // Unblocks its thread's poll/recv.
      }
    }
  }
  const std::uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof(one));
  if (acceptor_.joinable()) {
    acceptor_.join();
  }
  std::list<Conn> conns;
  {
    MutexLock lock(mu_);
    conns.swap(conns_);
  }
  for (Conn& c : conns) {
    if (c.thread.joinable()) {
      c.thread.join();
    }
  }
}

std::size_t Server::connections() {
  MutexLock lock(mu_);
  std::size_t n = 0;
  for (const Conn& c : conns_) {
    n += c.done ? 0 : 1;
  }
  return n;
}

void Server::ReapLocked() {
  for (auto it = conns_.begin(); it != conns_.end();) {
    if (it->done) {
      it->thread.join();  // Already past its last statement that touches *it.
      it = conns_.erase(it);
    } else {
      ++it;
    }
  }
}

void Server::AcceptLoop() {
  pollfd fds[2] = {{listener_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
  while (true) {
    const int n = ::poll(fds, 2, -1);
    if (n < 0 && errno != EINTR) {
      SLUICE_LOG(error, "fast lane: poll failed: {}", errno);
      return;
    }
    if (fds[1].revents != 0) {
      return;
    }
    if (n <= 0 || (fds[0].revents & POLLIN) == 0) {
      continue;
    }
    UniqueFd fd(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!fd.valid()) {
      continue;  // EAGAIN (another wake-up took it), ECONNABORTED, EMFILE...
    }
    MutexLock lock(mu_);
    ReapLocked();
    if (stopping_) {
      return;
    }
    if (conns_.size() >= limits_.max_connections) {
      SLUICE_LOG(warn, "fast lane: {} connections open; refusing one (the client uses gRPC)",
                 conns_.size());
      continue;  // Closed by `fd` going out of scope.
    }
    if (!key_.empty()) {
      if (pending_ >= limits_.max_pending_handshakes) {
        refusals_.Refused("a connection from " + PeerAddress(fd.get()),
                          "too many connections still in their handshake");
        continue;
      }
      ++pending_;
    }
    int one = 1;
    (void)::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    (void)SetIoTimeout(fd.get(), kBodyTimeout);
    Conn& c = conns_.emplace_back();
    c.io = std::make_shared<Responder::Conn>(std::move(fd));
    c.thread = std::thread([this, &c] { Serve(&c); });
  }
}

bool Server::Challenge(int fd, std::array<std::uint8_t, kChallengeBytes>* nonce) {
  RandomBytes(nonce->data(), nonce->size());
  ResponseHeader h;
  h.body_len = kChallengeBytes;
  return SendFrame(fd, h,
                   std::string_view(reinterpret_cast<const char*>(nonce->data()), nonce->size()))
      .ok();
}

bool Server::Handshake(const std::shared_ptr<Responder::Conn>& io,
                       const std::array<std::uint8_t, kChallengeBytes>& nonce, LaneMac* in) {
  const int fd = io->fd.get();
  const auto deadline = std::chrono::steady_clock::now() + limits_.handshake_timeout;
  const std::string peer = "a connection from " + PeerAddress(fd);
  std::byte head[kHeaderSize];
  if (!RecvBy(fd, head, kHeaderSize, deadline)) {
    refusals_.Refused(peer, "no Hello within the handshake timeout");
    return false;
  }
  Result<RequestHeader> h = DecodeRequest(head);
  const char* why = nullptr;
  if (!h.ok() || static_cast<Method>(h->method) != Method::kHello) {
    why = "no cluster credential";  // Refused unread: the body may be large.
  } else if (h->body_len != kHelloBytes) {
    why = "a malformed Hello";
  }
  std::array<std::uint8_t, kHelloBytes> hello{};
  if (why == nullptr) {
    if (!RecvBy(fd, hello.data(), hello.size(), deadline)) {
      refusals_.Refused(peer, "no Hello within the handshake timeout");
      return false;
    }
    const std::string_view client_nonce = Bytes(hello.data(), kChallengeBytes);
    const std::array<std::uint8_t, 32> want =
        HelloProof(key_, false, Bytes(nonce.data(), nonce.size()), client_nonce);
    if (SecureEquals(Bytes(hello.data() + kChallengeBytes, 32), Bytes(want.data(), want.size()))) {
      const std::array<std::uint8_t, 32> mine =
          HelloProof(key_, true, Bytes(nonce.data(), nonce.size()), client_nonce);
      Responder(io, false)(std::string(Bytes(mine.data(), mine.size())));
      const std::string_view master_nonce = Bytes(nonce.data(), nonce.size());
      *in = LaneMac(key_, true, master_nonce, client_nonce);
      MutexLock lock(io->write_mu);  // Every later answer carries a MAC.
      io->out = LaneMac(key_, false, master_nonce, client_nonce);
      return true;
    }
    why = "a wrong cluster credential";
  }
  refusals_.Refused(peer, why);
  Responder(
      io, false)(UnauthenticatedError(std::string("store master fast lane: ") + why +
                                      " (every role of a cluster takes the same --cluster-token)"));
  return false;
}

void Server::Serve(Conn* conn) {
  const std::shared_ptr<Responder::Conn> io = conn->io;
  const int fd = io->fd.get();
  std::vector<char> body;
  std::array<std::uint8_t, kChallengeBytes> nonce{};
  LaneMac in;  // Active once the Hello proved the key.
  bool ok = Challenge(fd, &nonce);
  if (!key_.empty()) {
    ok = ok && Handshake(io, nonce, &in);
    MutexLock lock(mu_);
    --pending_;
  }
  while (ok && WaitReadable(fd)) {
    std::byte head[kHeaderSize];
    if (!RecvAll(fd, head, kHeaderSize).ok()) {
      break;  // Closed, reset or stalled mid-header: drop the connection.
    }
    Result<RequestHeader> h = DecodeRequest(head);
    if (!h.ok()) {
      // The stream cannot be resynchronized: answer once, then close.
      Responder(io, false)(h.status());
      SLUICE_LOG(warn, "{}; closing the connection", h.status().message());
      break;
    }
    body.resize(h->body_len);
    if (h->body_len > 0 && !RecvAll(fd, body.data(), body.size()).ok()) {
      break;
    }
    if (in.active()) {
      FrameMac mac;
      if (!RecvAll(fd, mac.data(), mac.size()).ok()) {
        break;
      }
      if (!in.CheckNext(head, std::string_view(body.data(), body.size()), mac)) {
        // Not the client's: altered, replayed or injected on the way.
        refusals_.Refused("a connection from " + PeerAddress(fd),
                          "a request failed its integrity check");
        break;
      }
    }
    requests_.fetch_add(1, std::memory_order_relaxed);
    if (static_cast<Method>(h->method) == Method::kHello) {
      // An open lane has no proof to give; a keyed one gave it already.
      Responder(io, (h->flags & kFlagOneWay) != 0)(FailedPreconditionError(
          key_.empty() ? "store master fast lane: this master has no cluster credential"
                       : "store master fast lane: Hello is the connection's first frame only"));
      continue;
    }
    handler_(static_cast<Method>(h->method), std::string_view(body.data(), body.size()),
             Responder(io, (h->flags & kFlagOneWay) != 0));
  }
  ::shutdown(fd, SHUT_RDWR);  // Late answers fail; the socket closes with its last holder.
  MutexLock lock(mu_);
  conn->done = true;
}

}  // namespace sluice::internal::fastlane
