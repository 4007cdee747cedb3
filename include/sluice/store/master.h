// sluice/store/master.h
//
// The store master: metadata only (keys, sizes, tensor metadata, replica
// locations, leases). Object bytes never pass through it. It runs as its own
// process (`sluice master`) or embedded in another one (`sluice serve`).
// It is soft state: after a restart, store nodes re-register.
//
// Thread safety: all methods may be called from any thread.

#ifndef SLUICE_STORE_MASTER_H_
#define SLUICE_STORE_MASTER_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "sluice/security.h"
#include "sluice/status.h"

namespace sluice {

namespace internal {
class MasterServerImpl;
}

struct MasterConfig {
  std::string listen = "127.0.0.1:0";  // gRPC endpoint; port 0 picks one.
  // What peers dial ("host", "host:port", "[v6]", "[v6]:port"; a missing
  // port is the bound one): endpoint() and the fast lane offered to clients
  // (its own port on the advertised host). Empty: the `listen` address; a
  // wildcard one (0.0.0.0, ::) then offers the fast lane on whatever host
  // each client dialed the master at.
  std::string advertise;
  // Prometheus text at GET /metrics on this port of the `listen` host
  // (0 picks one); -1: no metrics endpoint.
  int metrics_port = -1;
  // The fast lane (hot calls over plain framed TCP on a port the kernel
  // picks on the `listen` host; clients learn it from the master): at most
  // this many connections at once, beyond which clients use gRPC. 0: off.
  std::size_t fast_lane_connections = 256;
  std::chrono::milliseconds heartbeat_interval{500};
  std::chrono::milliseconds node_timeout{3000};  // Silent this long: node lost.
  std::chrono::milliseconds put_timeout{60000};  // Open put this long: revoked.
  std::chrono::milliseconds read_lease_timeout{60000};
  double high_watermark = 0.95;  // Evict LRU objects above this usage...
  double low_watermark = 0.85;   // ...down to this.
  // How long space reserved for a client's next put stays held unused
  // (clients write into it only in the first fifth). 0: no reservations
  // (every put takes two round trips).
  std::chrono::milliseconds reservation_ttl{5000};
  // Byte budgets per cache class (LeasePolicy::cache_class) as fractions
  // of the store's memory, each in (0, 1], together at most 1: a class
  // past its budget evicts its own least recently used entries, never
  // another class's or a payload. Classes not named share what is left.
  std::map<std::string, double> cache_budgets;
  // A cache object read this many times is soft-pinned (evicted after
  // every cache object); 0: never.
  std::uint32_t soft_pin_reads = 0;
  // A put is acknowledged (PutEnd, PutReserved) only once every store node
  // holding a copy has the object in its directory, so a master that takes
  // over, rebuilding its table from the nodes' registrations, knows every
  // acknowledged object. Costs each put one master -> node -> master round
  // trip; without it a master crash can lose the last ~20 ms of commits.
  // `sluice master --etcd` (a standby exists) turns it on.
  bool durable_commits = false;
  // With a token, every gRPC call and fast-lane connection must carry the
  // cluster credential (else kUnauthenticated); TLS on gRPC when it has a
  // certificate. See sluice/security.h.
  SecurityConfig security;
};

// One cache class's share of the store (MasterConfig::cache_budgets).
struct CacheClassMetrics {
  std::uint64_t objects = 0;
  std::uint64_t bytes = 0;
  std::uint64_t budget_bytes = 0;  // 0: no budget.
  std::uint64_t evictions = 0;     // To keep the class in its budget.
};

struct MasterMetrics {
  std::uint64_t nodes = 0;
  std::uint64_t objects = 0;
  std::uint64_t objects_writing = 0;
  std::uint64_t capacity_bytes = 0;
  std::uint64_t used_bytes = 0;
  std::uint64_t evictions = 0;
  std::uint64_t lease_expiries = 0;
  std::uint64_t objects_lost = 0;
  std::uint64_t disk_capacity_bytes = 0;
  std::uint64_t disk_used_bytes = 0;
  std::uint64_t spills = 0;
  std::uint64_t loads = 0;
  std::uint64_t free_extents = 0;
  double fragmentation = 0;          // 0: each segment's free space is one extent.
  std::uint64_t reservations = 0;    // Space held for clients' next puts.
  std::uint64_t reserved_puts = 0;   // Puts committed over a reservation (one round trip).
  std::uint64_t objects_cached = 0;  // Committed cache and soft-pin objects (evictable).
  std::uint64_t soft_pins = 0;       // Cache objects soft-pinned by their reads.
  // Directory changes sent to store nodes and not yet acknowledged (a
  // master crash now would lose them without durable commits).
  std::uint64_t unacked_changes = 0;
  // Calls waiting for a key to be put (WaitFor, gets with a wait).
  std::uint64_t waiters = 0;
  std::map<std::string, CacheClassMetrics> cache_classes;
};

class MasterServer {
 public:
  // Starts serving. Also routes protobuf's process-wide log lines through
  // sluice's logger, at most one a second (a peer's malformed messages
  // cannot flood the log). Errors: kInvalidArgument (bad endpoint or
  // watermarks); kUnavailable (the port cannot be bound).
  static Result<std::unique_ptr<MasterServer>> Start(const MasterConfig& config);
  // Stops serving; pending WaitFor calls end with kCancelled.
  ~MasterServer();

  // "host:port" with the bound port.
  const std::string& endpoint() const;
  // The metrics endpoint's "host:port", or empty when disabled.
  const std::string& metrics_endpoint() const;
  MasterMetrics Metrics() const;

 private:
  explicit MasterServer(std::unique_ptr<internal::MasterServerImpl> impl);
  std::unique_ptr<internal::MasterServerImpl> impl_;
};

}  // namespace sluice

#endif  // SLUICE_STORE_MASTER_H_
