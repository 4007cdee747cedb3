// Serves the master's fast lane: one thread per connection reads a request
// frame and runs the handler, which answers through a Responder — at once,
// or later from whichever thread completes the call (a read parked until
// its object commits is answered by the committing thread, with no hand-off
// to the connection's thread). Callers keep connections open and idle
// between calls, so the thread count follows the number of concurrently
// calling client threads (capped by `max_connections`; a connection over
// the cap is closed at once and the client uses gRPC).
#ifndef SLUICE_STORE_FASTLANE_SERVER_H_
#define SLUICE_STORE_FASTLANE_SERVER_H_

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "common/mutex.h"
#include "common/net.h"
#include "common/security_keys.h"
#include "store/fastlane/frame.h"

namespace sluice::internal::fastlane {

// Sends one call's answer on its connection. Move-only: whoever holds it
// answers, on any thread; the first answer is sent, later ones are ignored
// (as is any answer to a one-way request, or after the connection closed).
// Clients send one request at a time on a connection, so answers never
// interleave.
class Responder {
 public:
  struct Conn;  // The connection's socket and write lock, shared.
  Responder(std::shared_ptr<Conn> conn, bool one_way);
  Responder(Responder&&) = default;
  Responder& operator=(Responder&&) = default;
  // Sends the serialized response, or the error.
  void operator()(const Result<std::string>& out);

 private:
  std::shared_ptr<Conn> conn_;
  bool one_way_;
  bool answered_ = false;
};

// What the server admits, before and after a connection proves the key.
struct ServerLimits {
  // Open connections; one more is closed at once (the client uses gRPC).
  std::size_t max_connections = 256;
  // With a key: connections that have not proved it yet; one more is
  // closed at accept, so strangers cannot take the slots.
  std::size_t max_pending_handshakes = 64;
  // With a key: a connection's Hello must arrive within this of its accept.
  std::chrono::milliseconds handshake_timeout{5000};
};

class Server {
 public:
  // Runs one call. `body` is the request's serialized message (unparsed: the
  // handler validates it), valid only during the call. The handler answers
  // through `respond`, before it returns or later from any thread (it must
  // answer every call, or the client waits for its timeout). Called on
  // connection threads, concurrently; it may block.
  using Handler = std::function<void(Method, std::string_view body, Responder respond)>;

  // Listens on `listen` (port 0 picks one). With a `key` (the cluster's
  // lane key), a connection serves requests only after a kHello proving
  // it, answered with the server's own proof; before it, any other frame
  // is refused unread, and `limits` bound the time and the number of such
  // connections. Without a key kHello is answered like any one-way call.
  // Every connection starts with the server's challenge frame. Errors:
  // kInvalidArgument (a zero limit), kUnavailable (bind).
  static Result<std::unique_ptr<Server>> Start(const HostPort& listen, Handler handler,
                                               ServerLimits limits, std::string key = {});
  // Closes the listener and every connection, then joins their threads; a
  // handler running at that moment finishes first.
  ~Server();

  // "host:port" with the bound port.
  const std::string& endpoint() const { return endpoint_; }
  // Open connections, and requests served so far (one-way ones included).
  std::size_t connections();
  std::uint64_t requests() const { return requests_.load(std::memory_order_relaxed); }
  // Connections refused for a missing or wrong credential, for no Hello
  // in time, or over the pending-handshake cap.
  std::uint64_t refused() const { return refusals_.count(); }

 private:
  struct Conn {
    std::shared_ptr<Responder::Conn> io;  // Set before the thread starts.
    std::thread thread;
    bool done = false;  // Guarded by the server's mu_.
  };
  Server(Handler handler, ServerLimits limits, std::string key);
  void AcceptLoop();
  void Serve(Conn* conn);
  // Sends the challenge; false when the connection failed.
  bool Challenge(int fd, std::array<std::uint8_t, kChallengeBytes>* nonce);
  // Reads and checks the first frame, a Hello, within the handshake
  // deadline, and answers it, starting the connection's MACs (`*in` for
  // requests); false (after answering or logging why) when the connection
  // must close.
  bool Handshake(const std::shared_ptr<Responder::Conn>& io,
                 const std::array<std::uint8_t, kChallengeBytes>& nonce, LaneMac* in);
  void ReapLocked() SLUICE_REQUIRES(mu_);

  Handler handler_;
  const ServerLimits limits_;
  const std::string key_;  // Empty: open lane.
  RefusalLog refusals_{"store master fast lane"};
  std::string endpoint_;
  UniqueFd listener_;
  UniqueFd wake_;  // eventfd: wakes the accept loop to stop.
  std::thread acceptor_;
  Mutex mu_;
  bool stopping_ SLUICE_GUARDED_BY(mu_) = false;
  std::list<Conn> conns_ SLUICE_GUARDED_BY(mu_);    // nodes are stable while threads run.
  std::size_t pending_ SLUICE_GUARDED_BY(mu_) = 0;  // Accepted, key not proved yet.
  std::atomic<std::uint64_t> requests_{0};
};

}  // namespace sluice::internal::fastlane

#endif  // SLUICE_STORE_FASTLANE_SERVER_H_
