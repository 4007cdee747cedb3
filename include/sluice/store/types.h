// sluice/store/types.h
//
// Value types of the store: tensor metadata carried with an object, the
// lease policy that decides its lifetime, and where its replicas live.

#ifndef SLUICE_STORE_TYPES_H_
#define SLUICE_STORE_TYPES_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

// Describes the bytes of an object as a tensor; the store never reads it,
// it only round-trips it to readers.
struct TensorMeta {
  std::string dtype;  // "bf16", "f32", "u8", ...
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;  // In elements; empty means contiguous.
  std::string layout;                 // Free-form, e.g. "NCTHW".
  friend bool operator==(const TensorMeta&, const TensorMeta&) = default;
};

enum class LeaseKind : std::uint8_t {
  kCache,            // LRU-evictable under memory pressure.
  kDeleteOnConsume,  // Deleted after `consume_count` completed reads; never evicted.
  kTtl,              // Removed `ttl` after commit.
  kSoftPin,          // Evicted only when no kCache object is left to evict.
};

// A cache class name (LeasePolicy::cache_class, cache kinds, budgets):
// 1..32 of [a-z0-9_].
inline bool IsCacheClassName(std::string_view name) {
  if (name.empty() || name.size() > 32) {
    return false;
  }
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) {
      return false;
    }
  }
  return true;
}

struct LeasePolicy {
  LeaseKind kind = LeaseKind::kCache;
  std::uint32_t consume_count = 1;   // kDeleteOnConsume: reads before deletion.
  std::chrono::milliseconds ttl{0};  // kTtl: lifetime after commit.
  // kCache / kSoftPin: the cache class ("condition", "feature", ...; 1..32
  // of [a-z0-9_]) whose byte budget the object counts against (the
  // master's MasterConfig::cache_budgets); empty: no class.
  std::string cache_class;

  static LeasePolicy Cache() { return {}; }
  static LeasePolicy DeleteOnConsume(std::uint32_t n) { return Of(LeaseKind::kDeleteOnConsume, n); }
  static LeasePolicy Ttl(std::chrono::milliseconds ttl) { return Of(LeaseKind::kTtl, 1, ttl); }
  static LeasePolicy SoftPin() { return Of(LeaseKind::kSoftPin); }

 private:
  static LeasePolicy Of(LeaseKind kind, std::uint32_t n = 1, std::chrono::milliseconds ttl = {}) {
    LeasePolicy p;
    p.kind = kind;
    p.consume_count = n;
    p.ttl = ttl;
    return p;
  }
};

// One copy of an object: a range of a store node's registered region.
struct ReplicaLocation {
  std::string node_id;
  std::string endpoint;  // The node's transfer-engine endpoint.
  std::uint64_t region_key = 0;
  std::uint64_t offset = 0;
};

// What a reader learns about an object.
struct ObjectMeta {
  std::uint64_t size = 0;
  std::optional<TensorMeta> tensor;
};

enum class StoreEventKind : std::uint8_t {
  kLost,      // Its last replica's node died: re-run whatever produced it.
  kExpired,   // Its TTL passed.
  kEvicted,   // Evicted under memory pressure (cache and soft-pin objects only).
  kConsumed,  // Deleted after its delete-on-consume reads.
};

struct StoreEvent {
  StoreEventKind kind;
  std::string key;
};

// What a store holds (StoreClient::Usage), as its master's directory has it.
struct StoreUsage {
  std::uint64_t nodes = 0;    // Registered store nodes.
  std::uint64_t objects = 0;  // Committed objects.
  std::uint64_t memory_capacity_bytes = 0, memory_used_bytes = 0;
  std::uint64_t disk_capacity_bytes = 0, disk_used_bytes = 0;  // 0: no disk tier.
  struct CacheClass {
    std::uint64_t objects = 0;
    std::uint64_t bytes = 0;
    std::uint64_t budget_bytes = 0;  // 0: no budget.
  };
  std::map<std::string, CacheClass> cache_classes;  // Cache objects per class.
};

}  // namespace sluice

#endif  // SLUICE_STORE_TYPES_H_
