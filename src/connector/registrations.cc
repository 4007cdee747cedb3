#include "connector/registrations.h"

#include <string>

namespace sluice::internal {

Result<std::pair<RegionKey, std::uint64_t>> RegistrationCache::Ensure(void* data, std::uint64_t len,
                                                                      Access access,
                                                                      MemoryKind kind, int device) {
  const auto addr = reinterpret_cast<std::uintptr_t>(data);
  MutexLock lock(mu_);
  auto it = regs_.upper_bound(addr);
  if (it != regs_.begin()) {
    auto prev = std::prev(it);
    const bool covers = prev->first <= addr && addr + len <= prev->first + prev->second.len;
    const bool enough = !AllowsRemoteRead(access) || AllowsRemoteRead(prev->second.access);
    if (covers && enough && prev->second.kind == kind) {
      return std::make_pair(prev->second.key, addr - prev->first);
    }
  }
  // Drop cached registrations overlapping the new range: that memory was
  // freed and reused by the caller (or needs wider access).
  for (auto o = regs_.begin(); o != regs_.end();) {
    if (o->first < addr + len && addr < o->first + o->second.len) {
      Status s = engine_.UnregisterMemory(o->second.key);
      if (!s.ok() && s.code() != StatusCode::kNotFound) {
        return s.WithContext("memory at " + std::to_string(addr) +
                             " overlaps a registration still in use");
      }
      o = regs_.erase(o);
    } else {
      ++o;
    }
  }
  Result<RegionKey> key = engine_.RegisterMemory(data, len, kind, access, device);
  if (!key.ok()) {
    return key.status().code() == StatusCode::kUnimplemented
               ? key.status().WithContext("device tensor (set ConnectorConfig::engine.device)")
               : key.status();
  }
  regs_[addr] = Registration{len, *key, access, kind};
  return std::make_pair(*key, std::uint64_t{0});
}

void RegistrationCache::Forget(const void* data) {
  const auto addr = reinterpret_cast<std::uintptr_t>(data);
  MutexLock lock(mu_);
  auto it = regs_.find(addr);
  if (it != regs_.end() && engine_.UnregisterMemory(it->second.key).ok()) {
    regs_.erase(it);
  }
}

}  // namespace sluice::internal
