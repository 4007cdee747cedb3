// sluice/cache/cache.h
//
// A typed cache on store objects: values under standard keys
// (sluice/cache/keys.h), stored with the `cache` (LRU-evictable) or
// `soft_pin` lease, never delete-on-consume, so any number of jobs read one
// entry and no job's cleanup removes it.
//
// GetOrCompute is single-flight across the cluster: of the concurrent
// misses for one key, one (the claimant) computes while the others wait for
// the object. The claim is a small store object "<key>.claim" with a ttl
// lease, so a claimant that dies mid-compute blocks the others for at most
// `claim_ttl`: once its claim expires the next waiter claims and computes.
//
// Thread-safe. Values move through the store client's staging buffer (one
// copy each way, into or out of the returned vector).

#ifndef SLUICE_CACHE_CACHE_H_
#define SLUICE_CACHE_CACHE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/status.h"
#include "sluice/store/client.h"

namespace sluice::cache {

struct CacheOptions {
  // The kind's name in metrics ("condition", "feature", "checkpoint") and
  // its entries' cache class in the store (whose byte budget they count
  // against: MasterConfig::cache_budgets): 1..32 of [a-z0-9_].
  std::string name = "condition";
  // kCache (LRU) or kSoftPin (evicted only after every kCache object);
  // other lease kinds are refused.
  LeasePolicy policy = LeasePolicy::Cache();
  // How long a claimant may compute before another may take over.
  std::chrono::milliseconds claim_ttl{10000};
  // How long GetOrCompute waits for another claimant's value in all.
  std::chrono::milliseconds wait_timeout{60000};
};

// Counters since the cache was made. A lookup is one Lookup or
// GetOrCompute call; it is a hit (the value was there) or a miss.
struct CacheStats {
  std::uint64_t lookups = 0;
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t computes = 0;             // Misses this process computed.
  std::uint64_t single_flight_waits = 0;  // Misses served by another's compute.
  std::uint64_t takeovers = 0;            // Claims taken after another's expired.
  std::uint64_t bytes_inserted = 0;

  CacheStats& operator+=(const CacheStats& o) {
    lookups += o.lookups;
    hits += o.hits;
    misses += o.misses;
    computes += o.computes;
    single_flight_waits += o.single_flight_waits;
    takeovers += o.takeovers;
    bytes_inserted += o.bytes_inserted;
    return *this;
  }
};

// Every counter of CacheStats with its name, in declaration order: what
// each role's /metrics exports (sluice_cache_<name>_total on the
// orchestrator, sluice_worker_cache_<name>_total on a worker).
inline constexpr std::pair<const char*, std::uint64_t CacheStats::*> kCacheCounters[] = {
    {"lookups", &CacheStats::lookups},
    {"hits", &CacheStats::hits},
    {"misses", &CacheStats::misses},
    {"computes", &CacheStats::computes},
    {"single_flight_waits", &CacheStats::single_flight_waits},
    {"takeovers", &CacheStats::takeovers},
    {"bytes_inserted", &CacheStats::bytes_inserted}};

class Cache {
 public:
  // REQUIRES: `store` outlives the cache.
  // Errors: kInvalidArgument (a lease kind other than cache or soft_pin;
  // claim_ttl or wait_timeout not positive; an empty name).
  static Result<std::unique_ptr<Cache>> Create(StoreClient* store, CacheOptions options);

  using Compute = std::function<Result<std::vector<std::byte>>()>;

  // The value under `key`: read from the store if present; else computed by
  // `compute` here (if this call wins the claim) or by whichever process
  // holds the claim, waited for. A value this call computed is inserted
  // before it returns; if another process inserted the key first, that
  // value is returned (both computed the same bytes under a standard key).
  // `compute` runs on the calling thread, at most once per call.
  // Errors: `compute`'s own (the claim is released at once so another may
  // try); kDeadlineExceeded (another's value did not arrive within
  // wait_timeout); the store's (kUnavailable, kResourceExhausted when no
  // room is left even after eviction).
  Result<std::vector<std::byte>> GetOrCompute(std::string_view key, const Compute& compute,
                                              const std::optional<TensorMeta>& tensor = {});

  // As GetOrCompute, for a caller that needs the entry to exist but not
  // its bytes (an encode stage whose consumer reads the entry): a hit is
  // an existence check, a wait ends when the value is committed, and
  // nothing is read back. Errors: GetOrCompute's.
  Status Ensure(std::string_view key, const Compute& compute,
                const std::optional<TensorMeta>& tensor = {});

  // The value under `key`, or nullopt on a miss. Errors: the store's.
  Result<std::optional<std::vector<std::byte>>> Lookup(std::string_view key);

  // Stores `value` under `key`; an existing value is kept (kOk). Errors:
  // the store's.
  Status Insert(std::string_view key, std::span<const std::byte> value,
                const std::optional<TensorMeta>& tensor = {});

  CacheStats stats() const;
  const CacheOptions& options() const { return options_; }

 private:
  Cache(StoreClient* store, CacheOptions options);
  // Get `key` (with `fetch`; else only whether it exists, as an empty
  // vector); nullopt when it is not committed (absent or being written).
  Result<std::optional<std::vector<std::byte>>> Read(std::string_view key, bool fetch = true);
  // GetOrCompute (`fetch`) or Ensure (the value only when computed here).
  Result<std::vector<std::byte>> Resolve(std::string_view key, const Compute& compute,
                                         const std::optional<TensorMeta>& tensor, bool fetch);

  StoreClient* store_;
  CacheOptions options_;
  std::atomic<std::uint64_t> lookups_{0}, hits_{0}, misses_{0}, computes_{0}, waits_{0},
      takeovers_{0}, bytes_{0};
};

// The claim object's key for `key`.
std::string ClaimKey(std::string_view key);

}  // namespace sluice::cache

#endif  // SLUICE_CACHE_CACHE_H_
