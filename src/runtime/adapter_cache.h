// The LoRA adapters a worker holds in memory, by digest: each loaded from
// the store on its first use (the orchestrator put the file there when it
// was registered, under AdapterStoreKey(digest)), the least
// recently used dropped once the resident files pass a byte budget. A
// dropped adapter stays valid for the jobs still holding it.
//
// Thread safety: every method may be called from any thread; one lock
// around the index (never held while the store is read).
#ifndef SLUICE_RUNTIME_ADAPTER_CACHE_H_
#define SLUICE_RUNTIME_ADAPTER_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sluice/status.h"
#include "sluice/store/client.h"

#include "runtime/reference/adapter.h"

namespace sluice::internal {

class AdapterCache {
 public:
  struct Stats {
    std::uint64_t hits = 0, loads = 0, evictions = 0;
    std::size_t resident = 0, resident_bytes = 0;
  };

  // Reads a stored object's bytes by key (a StoreClient's Get).
  using Loader = std::function<Result<std::vector<std::byte>>(const std::string& key)>;

  // `load` (null: every Get fails: the worker has no store).
  AdapterCache(Loader load, std::size_t budget_bytes)
      : load_(std::move(load)), budget_(budget_bytes) {}
  // Loading from `store` (may be null), which must outlive the cache.
  AdapterCache(StoreClient* store, std::size_t budget_bytes);

  // The adapter whose digest is `digest`, resident or read from the store
  // and checked (reference::Adapter::Parse, and that it has that digest).
  // `name` only names it in errors; `*loaded` (optional) says whether it
  // was read from the store by this call. Errors: kFailedPrecondition (no
  // store, or not in the store: lost with a store node, say),
  // kInvalidArgument (the stored file is not an adapter of that digest).
  Result<std::shared_ptr<const reference::Adapter>> Get(const std::string& digest,
                                                        const std::string& name,
                                                        bool* loaded = nullptr);
  Stats stats() const;
  // The digests of the resident adapters, most recently used first.
  std::vector<std::string> Resident() const;

 private:
  using Lru = std::list<std::pair<std::string, std::shared_ptr<const reference::Adapter>>>;
  Loader load_;
  std::size_t budget_;
  mutable std::mutex mu_;
  Lru lru_;  // Most recently used first.
  std::unordered_map<std::string, Lru::iterator> index_;
  Stats stats_;
};

}  // namespace sluice::internal

#endif  // SLUICE_RUNTIME_ADAPTER_CACHE_H_
