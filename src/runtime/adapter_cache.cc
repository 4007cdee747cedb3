#include "runtime/adapter_cache.h"

#include "sluice/adapters.h"

namespace sluice::internal {

AdapterCache::AdapterCache(StoreClient* store, std::size_t budget_bytes) : budget_(budget_bytes) {
  if (store != nullptr) {
    load_ = [store](const std::string& key) { return store->Get(key); };
  }
}

Result<std::shared_ptr<const reference::Adapter>> AdapterCache::Get(const std::string& digest,
                                                                    const std::string& name,
                                                                    bool* loaded) {
  if (loaded != nullptr) {
    *loaded = false;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = index_.find(digest); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      ++stats_.hits;
      return it->second->second;
    }
  }
  const std::string what = "adapter \"" + name + "\" (" + digest + ")";
  if (!load_) {
    return FailedPreconditionError(what + ": this worker has no store client (--master)");
  }
  Result<std::vector<std::byte>> bytes = load_(AdapterStoreKey(digest));
  if (!bytes.ok()) {
    // Not kNotFound: that code tells the orchestrator a cached input was
    // evicted (it re-runs the stage before); nothing upstream brings an
    // adapter back.
    return FailedPreconditionError(what + ": not in the store (" + bytes.status().ToString() +
                                   "); register it again");
  }
  Result<std::shared_ptr<const reference::Adapter>> a = reference::Adapter::Parse(
      std::string(reinterpret_cast<const char*>(bytes->data()), bytes->size()));
  if (!a.ok()) {
    return InvalidArgumentError(what + ": " + std::string(a.status().message()));
  }
  if ((*a)->digest() != digest) {
    return InvalidArgumentError(what + ": the stored file's digest is " + (*a)->digest());
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.loads;
  if (loaded != nullptr) {
    *loaded = true;
  }
  if (auto it = index_.find(digest); it != index_.end()) {  // Loaded meanwhile.
    return it->second->second;
  }
  lru_.emplace_front(digest, *a);
  index_[digest] = lru_.begin();
  stats_.resident_bytes += (*a)->bytes();
  // The newest stays even alone over the budget: its job needs it.
  while (stats_.resident_bytes > budget_ && lru_.size() > 1) {
    stats_.resident_bytes -= lru_.back().second->bytes();
    index_.erase(lru_.back().first);
    lru_.pop_back();
    ++stats_.evictions;
  }
  return *a;
}

std::vector<std::string> AdapterCache::Resident() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  out.reserve(lru_.size());
  for (const auto& [digest, adapter] : lru_) {
    out.push_back(digest);
  }
  return out;
}

AdapterCache::Stats AdapterCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s = stats_;
  s.resident = lru_.size();
  return s;
}

}  // namespace sluice::internal
