// Definitions of MasterState's private records, shared by its .cc files.
#ifndef SLUICE_STORE_MASTER_MASTER_STATE_TYPES_H_
#define SLUICE_STORE_MASTER_MASTER_STATE_TYPES_H_

#include <deque>
#include <list>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "store/master/master_state.h"

namespace sluice::internal {

struct MasterState::Node {
  struct Seg {
    std::uint64_t region_key;
    SegmentAllocator alloc;
  };
  std::string id;
  std::string endpoint;
  std::vector<Seg> segs;
  TimePoint last_seen;
  std::deque<NodeDelta> log;  // Directory changes not yet acknowledged.
  std::uint64_t next_seq = 1;
  std::uint64_t acked_seq = 0;                    // The highest change the node acknowledged.
  std::uint64_t epoch = 0;                        // Which registration of node `id` this is.
  std::optional<SegmentAllocator> disk;           // The disk tier, if any.
  std::map<std::uint64_t, NodeCommand> commands;  // Sent until reported done.

  std::uint64_t CapacityBytes() const {
    std::uint64_t c = 0;
    for (const Seg& s : segs) {
      c += s.alloc.capacity();
    }
    return c;
  }
  std::uint64_t UsedBytes() const {
    std::uint64_t u = 0;
    for (const Seg& s : segs) {
      u += s.alloc.used();
    }
    return u;
  }
  std::uint64_t FreeBytes() const { return CapacityBytes() - UsedBytes(); }
};

struct MasterState::Object {
  struct Placement {
    Node* node;
    std::size_t seg;
    std::uint64_t offset;
  };
  std::string key;
  std::uint64_t size = 0;
  std::optional<TensorMeta> tensor;
  LeasePolicy policy;
  bool complete = false;
  bool removed = false;  // Invisible; erased when the last read lease ends.
  std::uint64_t put_id = 0;
  std::string request_id;
  TimePoint put_deadline;
  std::optional<TimePoint> expires_at;
  std::vector<Placement> replicas;
  std::uint32_t reads_done = 0;
  std::map<std::uint64_t, TimePoint> leases;  // Read lease id -> deadline.
  std::list<Object*>* lru = nullptr;
  std::list<Object*>::iterator lru_it;

  // Disk tier (single-replica objects only). kSpilling: the node copies
  // memory to disk, readers still use memory. kDisk: the bytes are on disk
  // only (memory stays allocated while `mem_held`, for readers in flight).
  // kLoading: the node copies disk to a fresh memory range (`load_*`).
  enum class Tier : std::uint8_t { kMemory, kSpilling, kDisk, kLoading };
  Tier tier = Tier::kMemory;
  std::uint64_t disk_offset = 0;
  std::uint64_t cmd_id = 0;  // The command in flight; the object is not erased meanwhile.
  bool mem_held = false;
  std::size_t load_seg = 0;
  std::uint64_t load_offset = 0;
  int load_failures = 0;
};

}  // namespace sluice::internal

#endif  // SLUICE_STORE_MASTER_MASTER_STATE_TYPES_H_
