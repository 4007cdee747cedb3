// sluice/store/store_node.h
//
// A store node contributes memory to the store: it allocates shared
// (memfd-backed, pre-faulted) segments, registers them with the process's
// transfer engine for remote read/write, and announces them to the master,
// then keeps a heartbeat. Clients read and write the segments directly over
// the engine (shm from the same host, tcp otherwise); the node's CPU is not
// on the data path. Embeddable in any process, or alone as
// `sluice store-node`.
//
// Thread safety: the node runs one heartbeat thread; its methods may be
// called from any thread.

#ifndef SLUICE_STORE_STORE_NODE_H_
#define SLUICE_STORE_STORE_NODE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "sluice/security.h"
#include "sluice/status.h"
#include "sluice/transfer/engine.h"

namespace sluice {

namespace internal {
class StoreNodeImpl;
}

struct StoreNodeConfig {
  std::string master;  // Master's "host:port".
  // Where the master is now, asked when it cannot be reached (e.g. the
  // leader in etcd): a different "host:port" replaces `master`, and the
  // node registers there with every object it holds. Empty answer or no
  // function: keep trying the same one. Called on the node's heartbeat
  // thread.
  std::function<std::string()> resolve_master;
  std::string node_id;  // Empty: the engine's endpoint.
  std::uint64_t memory_bytes = std::uint64_t{1} << 30;
  int segments = 1;  // The memory is split into this many segments.
  // Disk tier: unconsumed delete-on-consume payloads spill here when memory
  // runs short. The node reserves `disk_bytes` in one file in `disk_dir`
  // (sluice-<node_id>.tier, with an index beside it). A node restarted
  // with the same node_id, disk_dir and disk_bytes keeps the file and
  // registers the objects on it again; otherwise the file starts empty.
  std::string disk_dir;
  std::uint64_t disk_bytes = 0;  // 0: no disk tier.
  // Caps the disk tier's copy rate, spills and loads together, so spills
  // leave the disk to other users (0: no cap). Copies run on their own
  // thread: heartbeats go on while they run.
  std::uint64_t disk_bytes_per_s = 0;
  std::chrono::milliseconds rpc_timeout{5000};
  // The cluster credential and TLS for its calls to the master
  // (sluice/security.h). The engine must carry the matching transfer
  // secret (TransferSecret), or clients' handshakes with it fail.
  SecurityConfig security;
};

// What a store node holds and has moved, for its /metrics (`sluice
// store-node --metrics-port`).
struct StoreNodeMetrics {
  std::uint64_t memory_bytes = 0;  // Contributed.
  std::uint64_t disk_bytes = 0;    // Its disk tier (0: none).
  bool registered = false;
  struct Held {
    std::uint64_t objects = 0;
    std::uint64_t memory_bytes = 0;
    std::uint64_t disk_bytes = 0;  // Spilled to its disk tier.
  };
  // The objects the master placed here, as of its last heartbeat answer,
  // by lease policy ("cache", "soft_pin", "delete_on_consume", "ttl") and
  // cache class ("" for none).
  std::map<std::pair<std::string, std::string>, Held> held;
  // Disk-tier copies run to the end, their bytes, and copies that failed.
  std::uint64_t spills = 0, loads = 0, bytes_spilled = 0, bytes_loaded = 0, disk_failures = 0;
};

class StoreNode {
 public:
  // Allocates and registers the memory, then registers with the master
  // (retrying in the background if the master is not up yet).
  // REQUIRES: `engine` outlives the node.
  // Errors: kInvalidArgument (bad master endpoint, memory under 1 MiB per
  // segment, segments outside 1..64, a disk size without a usable
  // directory or under 1 MiB); kResourceExhausted (no memory, or the disk
  // space cannot be reserved).
  static Result<std::unique_ptr<StoreNode>> Start(TransferEngine* engine,
                                                  const StoreNodeConfig& config);
  // Stops heartbeats and unregisters the memory. Objects on this node are
  // reported lost by the master once its heartbeat times out.
  ~StoreNode();

  const std::string& node_id() const;
  // True once the master has accepted the node's registration.
  bool registered() const;
  // A snapshot of its counters. Thread-safe.
  StoreNodeMetrics Metrics() const;

 private:
  explicit StoreNode(std::unique_ptr<internal::StoreNodeImpl> impl);
  std::unique_ptr<internal::StoreNodeImpl> impl_;
};

}  // namespace sluice

#endif  // SLUICE_STORE_STORE_NODE_H_
