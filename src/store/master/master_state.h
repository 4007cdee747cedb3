// The master's metadata: nodes and their segments, objects and their
// replicas, put and read leases, lifetimes and eviction. Pure state: no I/O,
// no threads, time passed in by the caller, so tests drive it directly and
// deterministically. Not thread-safe: the service holds one mutex around it.
#ifndef SLUICE_STORE_MASTER_MASTER_STATE_H_
#define SLUICE_STORE_MASTER_MASTER_STATE_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sluice/status.h"
#include "sluice/store/types.h"

#include "store/master/segment_allocator.h"

namespace sluice::internal {

using MasterClock = std::chrono::steady_clock;
using TimePoint = MasterClock::time_point;

struct MasterOptions {
  std::chrono::milliseconds heartbeat_interval{500};
  std::chrono::milliseconds node_timeout{3000};         // No heartbeat this long: node lost.
  std::chrono::milliseconds put_timeout{60000};         // PutStart without PutEnd: revoked.
  std::chrono::milliseconds read_lease_timeout{60000};  // GetStart without GetEnd: dropped.
  double high_watermark = 0.95;                         // Evict when usage passes this fraction...
  double low_watermark = 0.85;                          // ...down to this one.
  std::uint64_t min_segment_bytes = std::uint64_t{1} << 20;
  std::size_t max_key_bytes = 1024;
  // Reservations (space held for a client's next put, committed with
  // PutReserved in one round trip) unused this long are freed.
  std::chrono::milliseconds reservation_timeout{5000};
  std::size_t max_reservations = 4096;
  // Added to every reservation id, so that ids from different master
  // instances differ (the service sets a random one; tests keep 0).
  std::uint64_t id_salt = 0;
  // Byte budgets per cache class (LeasePolicy::cache_class), as fractions
  // of memory capacity: an entry committed past its class's budget evicts
  // that class's least recently used entries (cache before soft pin,
  // never one being read) until the class fits. Other classes and
  // payloads are never evicted for it. Unnamed classes have no budget.
  std::map<std::string, double> cache_budgets;
  // A cache object read this many times becomes soft-pinned (evicted only
  // once no cache object is left to evict): the hottest entries, e.g. the
  // few common negative prompts, stay. 0: never.
  std::uint32_t soft_pin_reads = 0;
  // PutEnd and PutReserved answer once every node holding a copy has
  // acknowledged the commit's directory change (MasterConfig::
  // durable_commits); the core waits, the state only records.
  bool durable_commits = false;
};

struct SegmentDesc {
  std::uint64_t region_key = 0;
  std::uint64_t size = 0;
};

// A node's contribution: memory segments and an optional disk tier.
struct NodeResources {
  std::vector<SegmentDesc> segments;
  std::uint64_t disk_bytes = 0;  // 0: no disk tier.
};

// What a store node keeps about each object it holds, so that a restarted
// master can rebuild its table from the nodes' re-registrations.
struct ObjectRecord {
  std::string key;
  std::uint64_t region_key = 0;
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
  std::optional<TensorMeta> tensor;
  LeasePolicy policy;
  bool on_disk = false;  // Spilled: the bytes are at `disk_offset` of the node's disk file.
  std::uint64_t disk_offset = 0;
  std::uint32_t reads_done = 0;         // Completed reads so far.
  std::optional<TimePoint> expires_at;  // TTL objects (sent to nodes as time left).
};

// Work the master asks of a node (sent with every heartbeat answer until the
// node reports it done): copy an object between memory and the disk tier.
struct NodeCommand {
  enum class Kind : std::uint8_t { kSpill, kLoad };
  std::uint64_t id = 0;
  Kind kind = Kind::kSpill;
  std::string key;
  std::uint64_t mem_region_key = 0;
  std::uint64_t mem_offset = 0;
  std::uint64_t disk_offset = 0;
  std::uint64_t size = 0;
};

struct CommandResult {
  std::uint64_t id = 0;
  bool ok = false;
  std::string error;
};

// One change to a node's directory, numbered per node; the node acknowledges
// the highest number it applied with its next heartbeat.
struct NodeDelta {
  std::uint64_t seq = 0;
  bool added = false;  // Else removed (only record.key is set).
  ObjectRecord record;
};

struct HeartbeatReply {
  bool reregister = false;  // The master does not know this node.
  std::vector<NodeDelta> deltas;
  std::vector<NodeCommand> commands;  // Not yet reported done.
};

struct PutRequest {
  std::string key;
  std::uint64_t size = 0;
  std::optional<TensorMeta> tensor;
  LeasePolicy policy;
  std::uint32_t replica_num = 1;
  std::string preferred_node;  // Node id or endpoint; empty = any.
  // The writer's transfer endpoint: nodes on its host come next after the
  // preferred one (writes stay on the host; reads cross it once).
  std::string client_endpoint;
  std::string request_id;
  // Endpoints the caller could not reach: avoided when other nodes have
  // room without evicting or spilling anything.
  std::vector<std::string> unreachable;
};

struct PutGrant {
  std::uint64_t put_id = 0;
  std::vector<ReplicaLocation> replicas;
};

struct ReadGrant {
  // The object is on the disk tier and being loaded: no lease was taken;
  // ask again once TakeLoaded() names the key.
  bool loading = false;
  std::uint64_t lease_id = 0;
  ObjectMeta meta;
  std::vector<ReplicaLocation> replicas;  // Nearest first.
};

enum class ObjectEventKind : std::uint8_t { kLost, kExpired, kEvicted, kConsumed };
struct ObjectEvent {
  ObjectEventKind kind;
  std::string key;
};

// One cache class's share of the store.
struct CacheClassStats {
  std::uint64_t objects = 0;       // Committed, in memory or on disk.
  std::uint64_t bytes = 0;         // Their size times replicas.
  std::uint64_t budget_bytes = 0;  // 0: no budget.
  std::uint64_t evictions = 0;     // Evicted to keep the class in its budget.
};

struct MasterStats {
  std::uint64_t nodes = 0;
  std::uint64_t objects = 0;         // Complete objects.
  std::uint64_t objects_cached = 0;  // Of those, cache and soft-pin (evictable) ones.
  std::uint64_t objects_writing = 0;
  std::uint64_t capacity_bytes = 0;
  std::uint64_t used_bytes = 0;
  std::uint64_t evictions = 0;
  std::uint64_t lease_expiries = 0;  // Put and read leases that timed out.
  std::uint64_t objects_lost = 0;
  std::uint64_t disk_capacity_bytes = 0;
  std::uint64_t disk_used_bytes = 0;
  std::uint64_t free_extents = 0;  // Memory free ranges over all segments.
  // 1 - (sum of largest free extents / free bytes) over memory segments:
  // 0 when every segment's free space is one extent.
  double fragmentation = 0;
  std::uint64_t reservations = 0;   // Open now.
  std::uint64_t reserved_puts = 0;  // Puts committed over a reservation.
  std::uint64_t spills = 0;         // Completed memory -> disk moves.
  std::uint64_t loads = 0;          // Completed disk -> memory moves.
  std::uint64_t soft_pins = 0;      // Cache objects promoted by their reads.
  // Directory changes nodes have not acknowledged yet: what a master crash
  // now would lose (without durable commits).
  std::uint64_t unacked_changes = 0;
  std::map<std::string, CacheClassStats> cache_classes;
};

class MasterState {
 public:
  explicit MasterState(MasterOptions options);
  ~MasterState();

  // Adds a node, or replaces it if its segments changed (a restarted node:
  // its old memory objects are dropped and reported lost; its disk-tier
  // objects stay when `objects` lists them where this master has them).
  // Idempotent for the same segments. A new node's `objects` (its
  // directory, after a master restart) become complete objects again,
  // unless this master dropped that node before (they are stale); records
  // that do not fit (unknown region, overlapping ranges, a key held
  // elsewhere with another size) are skipped and counted in `*skipped`. Errors: kInvalidArgument
  // (empty id/endpoint, no segments, a segment under min_segment_bytes, duplicate region keys).
  Status RegisterNode(const std::string& node_id, const std::string& endpoint,
                      const NodeResources& resources, const std::vector<ObjectRecord>& objects,
                      TimePoint now, std::size_t* skipped = nullptr);
  // Records the node as alive, applies the results of finished commands,
  // drops directory changes up to `acked_seq` and returns the rest (at most
  // 4096) with the commands still pending.
  HeartbeatReply Heartbeat(const std::string& node_id, std::uint64_t acked_seq,
                           const std::vector<CommandResult>& done, TimePoint now);
  // True when a heartbeat from `node_id` that acknowledged `acked_seq` would
  // carry something: directory changes after it, or commands.
  bool HasNews(const std::string& node_id, std::uint64_t acked_seq) const;
  // Durable commits: the directory change a commit logged on one node.
  struct CommitMark {
    std::string node_id;
    std::uint64_t epoch = 0;  // Of the node's registration.
    std::uint64_t seq = 0;
  };
  // One mark per node holding a replica of committed `key` (its latest
  // change there, which covers the commit's).
  std::vector<CommitMark> CommitMarks(const std::string& key) const;
  // True once the node acknowledged the mark's change in a heartbeat, or is
  // gone or registered again (nothing left to wait for).
  bool Acknowledged(const CommitMark& m) const;
  // Keys whose disk-tier load finished (or failed) since the last call: their
  // parked readers may ask again.
  std::vector<std::string> TakeLoaded();

  Result<PutGrant> PutStart(const PutRequest& req, TimePoint now);
  Status PutEnd(const std::string& key, std::uint64_t put_id, TimePoint now);
  Status PutRevoke(const std::string& key, std::uint64_t put_id);
  // Holds space for one future put of `req.size` bytes with `req`'s replica
  // count and preferred node (the key, tensor and policy are ignored). A
  // best-effort offer, declined with kResourceExhausted when it does not fit
  // in free space (it never evicts), when it would take memory past the high
  // watermark and too little is evictable for its put to get back under it
  // (that put's commit evicts, as PutStart does), or when too many
  // reservations are open; kInvalidArgument / kFailedPrecondition as
  // PutStart.
  // Freed after `reservation_timeout` unless committed.
  Result<PutGrant> Reserve(const PutRequest& req, TimePoint now);
  // PutStart + PutEnd in one step over a reservation whose bytes the caller
  // has written: the key becomes a complete object of the reservation's size
  // (`req.size` must match). Errors: kNotFound (unknown or expired
  // reservation, or its node was lost: the caller puts again the long way),
  // kAlreadyExists (the key exists; the reservation is freed), the key and
  // policy errors of PutStart. A retry of a success answers OK.
  Status PutReserved(const PutRequest& req, std::uint64_t reservation_id, TimePoint now);
  // Frees an unused reservation; unknown ids are ignored (idempotent).
  void Unreserve(std::uint64_t reservation_id);
  Result<ReadGrant> GetStart(const std::string& key, const std::string& client_endpoint,
                             TimePoint now);
  Status GetEnd(const std::string& key, std::uint64_t lease_id, bool completed);
  // The read lease `lease_id` on `key` lasts read_lease_timeout from `now`.
  // Errors: kNotFound (no such lease: ended or expired). Idempotent.
  Status RenewRead(const std::string& key, std::uint64_t lease_id, TimePoint now);
  Status Remove(const std::string& key);
  bool Exists(const std::string& key) const;

  // Expires put and read leases, TTLs and silent nodes.
  void Tick(TimePoint now);
  // Events since the last call, oldest first.
  std::vector<ObjectEvent> TakeEvents();
  MasterStats Stats() const;
  // Transfer endpoints of the registered nodes, sorted.
  std::vector<std::string> NodeEndpoints() const;
  const MasterOptions& options() const { return options_; }

 private:
  struct Node;
  struct Object;
  Status CheckKey(const std::string& key) const;
  // The key, size and policy checks shared by PutStart and PutReserved.
  Status CheckPut(const PutRequest& req) const;
  // Size and replica-count checks: kInvalidArgument / kFailedPrecondition.
  Status CheckPlacement(const PutRequest& req) const;
  // Makes a written object complete and visible.
  void Commit(Object& o, TimePoint now);
  PutGrant GrantOf(const Object& o) const;
  // One placement pass without eviction; false (nothing held) if it failed.
  // `skip_unreachable`: only on nodes outside req.unreachable.
  bool TryPlace(Object& obj, const PutRequest& req, bool skip_unreachable);
  void ExpireReservations(TimePoint now);
  // Frees reservations past half their ttl (clients write into one only in
  // its first fifth): called before evicting for a put.
  bool ReclaimReservations(TimePoint now);
  void FreeReservation(std::unordered_map<std::uint64_t, std::unique_ptr<Object>>::iterator it);
  // (used, capacity) bytes over every node's memory segments.
  std::pair<std::uint64_t, std::uint64_t> MemoryUsage() const;
  // A complete or writing object that Remove has not hidden; null if none.
  Object* FindVisible(const std::string& key);
  bool Restore(Node* node, const ObjectRecord& rec, TimePoint now);
  // Disk tier (master_state_tier.cc).
  // Spills payloads until memory is under the low watermark with `need`
  // bytes free: over every node, or only `on`'s memory and payloads.
  void ScheduleSpills(std::uint64_t need = 0, const Node* on = nullptr);
  Status StartLoad(Object* obj);
  void CommandDone(Node* node, const CommandResult& r);
  void FreeTiers(Object* obj);
  std::uint64_t InFlightSpillBytes(const Node* on = nullptr) const;
  Status Allocate(Object& obj, const PutRequest& req, TimePoint now);
  bool EvictOne(const Object* protect);
  // Evicts `just`'s class's LRU entries (never `just`) while the class is
  // past its budget (master_state_cache.cc).
  void EnforceClassBudget(const Object* just);
  // A cache object read soft_pin_reads times becomes soft-pinned.
  void MaybeSoftPin(Object* obj);
  std::uint64_t ClassBytes(const std::string& cache_class) const;
  // Past the high watermark, evicts LRU objects (never `protect`) down to
  // the low watermark, counting memory without reservations.
  void EvictToLowWatermark(const Object* protect = nullptr);
  // Bytes EvictOne could free now, counted until `enough` is reached.
  std::uint64_t EvictableBytes(std::uint64_t enough) const;
  void Erase(Object* obj, std::optional<ObjectEventKind> event);
  // Removes a node and the objects only it held (reported lost when
  // `lost`, except those in `kept`, which a restarted node brings back).
  void DropNode(const std::string& node_id, bool lost, const std::set<std::string>* kept = nullptr);
  // True when `rec` (from `node`'s registration) is on disk where this
  // master placed it (or being loaded back from there).
  bool OnDiskAt(const Node& node, const ObjectRecord& rec) const;
  void Touch(Object* obj);
  void Emit(ObjectEventKind kind, const std::string& key);
  void LogDelta(Object* obj, bool added);

  MasterOptions options_;
  std::map<std::string, std::unique_ptr<Node>> nodes_;
  std::uint64_t next_node_epoch_ = 1;
  // Nodes this master dropped (most recent kMaxDeparted): what they list
  // when they come back is stale.
  static constexpr std::size_t kMaxDeparted = 4096;
  std::set<std::string> departed_;
  std::deque<std::string> departed_order_;
  std::unordered_map<std::string, std::unique_ptr<Object>> objects_;
  // Open reservations by id: keyless objects holding space.
  std::unordered_map<std::uint64_t, std::unique_ptr<Object>> reservations_;
  std::uint64_t reserved_bytes_ = 0;  // Over reservations_, times replicas.
  std::list<Object*> lru_cache_;      // Complete kCache objects, least recent first.
  std::list<Object*> lru_soft_pin_;   // Complete kSoftPin objects.
  std::list<Object*> lru_consume_;    // Complete kDeleteOnConsume objects: spill order.
  std::vector<std::string> loaded_;   // For TakeLoaded().
  std::uint64_t next_id_ = 1;
  std::vector<ObjectEvent> events_;
  MasterStats counters_;
};

}  // namespace sluice::internal

#endif  // SLUICE_STORE_MASTER_MASTER_STATE_H_
