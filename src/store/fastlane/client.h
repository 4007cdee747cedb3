// Calls the master's fast lane: a pool of persistent connections, one per
// concurrently calling thread; each call is a blocking round trip on one of
// them. After sending, the caller spins briefly on the socket before
// sleeping in poll: on a small host, a sleeping thread's wake-up costs as
// much as the master's work, so a short spin halves the round trip. Only a
// lone caller spins: with several calls in flight the CPU is better spent on
// the callers' copies.
#ifndef SLUICE_STORE_FASTLANE_CLIENT_H_
#define SLUICE_STORE_FASTLANE_CLIENT_H_

#include <atomic>
#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "common/mutex.h"
#include "common/net.h"
#include "store/fastlane/frame.h"

namespace sluice::internal::fastlane {

class Client {
 public:
  // `spin` is how long a caller polls its socket before sleeping (0: never).
  // `key` is the cluster's lane key (empty: an open cluster): each new
  // connection answers the server's challenge with it.
  Client(HostPort endpoint, std::chrono::microseconds spin, std::size_t max_idle,
         std::string key = {});

  // Outcome of a call: `transport_ok` is false when the lane itself failed
  // (connect, send, receive, a malformed answer): the request may or may
  // not have run, and the caller retries it over gRPC. Otherwise `result`
  // is the master's answer: the serialized response, or its error.
  struct Outcome {
    bool transport_ok = false;
    Result<std::string> result = std::string();
  };
  // Sends `body` as a `m` request and waits up to `timeout` for the answer.
  // Thread-safe; calls on different threads use different connections.
  Outcome Call(Method m, std::string_view body, std::chrono::milliseconds timeout);
  // Sends a one-way request (no answer is read). False if the lane failed.
  bool Send(Method m, std::string_view body, std::chrono::milliseconds timeout);

  // Closes every idle connection (after a lane failure: they are stale).
  void Reset();

  // True when an idle connection exists and the master has not closed it: a
  // master that exited (even killed) has, so a caller holding state from
  // this master instance (a reservation) learns it is gone without a round
  // trip. One non-blocking poll; false when no connection is idle.
  bool IdleConnectionAlive();

  const HostPort& endpoint() const { return endpoint_; }

 private:
  // A connection and, once its Hello proved the key, its frames' MACs.
  struct Conn {
    UniqueFd fd;
    LaneMac out, in;
  };
  Result<Conn> Acquire(std::chrono::milliseconds timeout);
  void Release(Conn conn);
  Status Write(Conn& conn, Method m, std::uint16_t flags, std::string_view body);
  Status ReadExact(int fd, char* p, std::size_t len, bool spin,
                   std::chrono::steady_clock::time_point deadline);

  // Reads a new connection's challenge and, with a key, answers it and
  // starts its MACs.
  Status Greet(Conn& conn, std::chrono::milliseconds timeout);

  HostPort endpoint_;
  std::chrono::microseconds spin_;
  const std::string key_;
  std::size_t max_idle_;
  Mutex mu_;
  std::vector<Conn> idle_ SLUICE_GUARDED_BY(mu_);
  std::atomic<int> in_flight_{0};
};

}  // namespace sluice::internal::fastlane

#endif  // SLUICE_STORE_FASTLANE_CLIENT_H_
