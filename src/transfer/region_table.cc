#include "transfer/region_table.h"

#include <string>

#include "common/mutex.h"

namespace sluice::internal {

Result<RegionKey> RegionTableLocal::Add(void* addr, std::size_t len, MemoryKind kind, Access access,
                                        std::shared_ptr<SharedAllocation> shared, int device,
                                        RegionPublished published) {
  if (addr == nullptr || len == 0) {
    return InvalidArgumentError("RegisterMemory: address must be non-null and length > 0");
  }
  if (static_cast<std::uint8_t>(access) > 3) {
    return InvalidArgumentError("RegisterMemory: unknown access value");
  }
  const auto start = reinterpret_cast<std::uintptr_t>(addr);
  if (start + len < start) {
    return InvalidArgumentError("RegisterMemory: range wraps the address space");
  }
  auto region = std::make_unique<LocalRegion>();
  region->addr = static_cast<char*>(addr);
  region->length = len;
  region->kind = kind;
  region->access = access;
  region->shared = std::move(shared);
  region->device = device;
  region->published = std::move(published);
  WriterLock lock(mu_);
  auto next = by_addr_.lower_bound(start);
  if (next != by_addr_.end() && next->first < start + len) {
    return AlreadyExistsError("RegisterMemory: range overlaps a registered region");
  }
  if (next != by_addr_.begin()) {
    const LocalRegion& prev = *std::prev(next)->second;
    if (reinterpret_cast<std::uintptr_t>(prev.addr) + prev.length > start) {
      return AlreadyExistsError("RegisterMemory: range overlaps a registered region");
    }
  }
  do {
    RandomBytes(&region->key.value, sizeof(region->key.value));
  } while (region->key.value == 0 || by_key_.count(region->key.value) != 0);
  const RegionKey key = region->key;
  by_key_[key.value] = region.get();
  by_addr_[start] = std::move(region);
  ++version_;
  return key;
}

Status RegionTableLocal::Remove(RegionKey key) {
  WriterLock lock(mu_);
  auto it = by_key_.find(key.value);
  if (it == by_key_.end()) {
    return NotFoundError("UnregisterMemory: no region with that key");
  }
  const std::int64_t pins = it->second->pins.load(std::memory_order_acquire);
  if (pins != 0) {
    return FailedPreconditionError("UnregisterMemory: " + std::to_string(pins) +
                                   " op(s) still in flight on this region; wait for them");
  }
  by_addr_.erase(reinterpret_cast<std::uintptr_t>(it->second->addr));
  by_key_.erase(it);
  ++version_;
  return Status::Ok();
}

Result<LocalRegion*> RegionTableLocal::PinLocal(const void* addr, std::uint64_t len) {
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  ReaderLock lock(mu_);
  auto it = by_addr_.upper_bound(a);
  if (it != by_addr_.begin()) {
    LocalRegion* r = std::prev(it)->second.get();
    const auto start = reinterpret_cast<std::uintptr_t>(r->addr);
    if (a >= start && len <= r->length && a - start <= r->length - len) {
      r->pins.fetch_add(1, std::memory_order_relaxed);
      return r;
    }
  }
  return InvalidArgumentError("local buffer is not inside one registered region");
}

Status CheckRange(std::uint64_t region_length, Access access, std::uint64_t offset,
                  std::uint64_t len, bool write) {
  if (offset > region_length || len > region_length - offset) {
    return InvalidArgumentError("op [" + std::to_string(offset) + ", +" + std::to_string(len) +
                                ") falls outside the region of " + std::to_string(region_length) +
                                " bytes");
  }
  if (write ? !AllowsRemoteWrite(access) : !AllowsRemoteRead(access)) {
    return PermissionDeniedError(std::string("region does not allow remote ") +
                                 (write ? "writes" : "reads"));
  }
  return Status::Ok();
}

Result<char*> RegionTableLocal::PinRemote(std::uint64_t key, std::uint64_t offset,
                                          std::uint64_t len, bool write, bool device_ok,
                                          LocalRegion** region) {
  ReaderLock lock(mu_);
  auto it = by_key_.find(key);
  if (it == by_key_.end() || it->second->access == Access::kLocalOnly) {
    return NotFoundError("no region with key " + std::to_string(key) + " on the target");
  }
  LocalRegion* r = it->second;
  SLUICE_RETURN_IF_ERROR(CheckRange(r->length, r->access, offset, len, write));
  if (r->kind != MemoryKind::kHost && !device_ok) {
    return UnimplementedError("region " + std::to_string(key) +
                              " on the target is device memory, and the target has no device "
                              "backend to stage it");
  }
  r->pins.fetch_add(1, std::memory_order_relaxed);
  *region = r;
  return r->addr + offset;
}

RegionTable RegionTableLocal::Snapshot() const {
  ReaderLock lock(mu_);
  RegionTable t;
  t.version = version_;
  for (const auto& [start, r] : by_addr_) {
    if (r->access == Access::kLocalOnly) {
      continue;
    }
    WireRegion w;
    w.info =
        RegionInfo{r->key, start, r->length, r->kind, r->access, r->shared != nullptr, r->device};
    w.access = r->published.access;
    t.regions.push_back(std::move(w));
  }
  return t;
}

}  // namespace sluice::internal
