// This engine's registered regions, looked up by address (local side of an
// op) and by key (remote side). Each region counts pins: ops in flight that
// use it. Unregistering a pinned region fails instead of freeing memory an op
// still touches.
#ifndef SLUICE_TRANSFER_REGION_TABLE_H_
#define SLUICE_TRANSFER_REGION_TABLE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "sluice/memory.h"
#include "sluice/status.h"

#include "common/mutex.h"
#include "transfer/shm/shared_alloc.h"
#include "transfer/wire.h"

namespace sluice::internal {

// What the transports publish for a region, and what they keep with it.
struct RegionPublished {
  std::vector<AccessBlob> access;            // Into the region table as is.
  std::vector<std::shared_ptr<void>> holds;  // Dropped with the region.
};

struct LocalRegion {
  RegionKey key;
  char* addr = nullptr;
  std::size_t length = 0;
  MemoryKind kind = MemoryKind::kHost;
  Access access = Access::kLocalOnly;
  std::shared_ptr<SharedAllocation> shared;  // Set when inside AllocateShared memory.
  int device = -1;                           // For kDevice memory; -1 for host memory.
  RegionPublished published;
  std::atomic<std::int64_t> pins{0};
};

// Thread-safe. Pins are taken under a shared lock; removal under the
// exclusive lock, so a region is never removed between lookup and pin.
// Whether an op on [offset, offset + len) of a region of `region_length`
// bytes with `access` is allowed: the check a target makes on every op, and
// an initiator on shm ops against the peer's table. Errors:
// kInvalidArgument (outside the region), kPermissionDenied (access bits).
Status CheckRange(std::uint64_t region_length, Access access, std::uint64_t offset,
                  std::uint64_t len, bool write);

class RegionTableLocal {
 public:
  Result<RegionKey> Add(void* addr, std::size_t len, MemoryKind kind, Access access,
                        std::shared_ptr<SharedAllocation> shared, int device = -1,
                        RegionPublished published = {});
  Status Remove(RegionKey key);

  // Pins the region holding [addr, addr+len) for a local op.
  // Errors: kInvalidArgument if no single region holds the range.
  Result<LocalRegion*> PinLocal(const void* addr, std::uint64_t len);

  // Validates a peer's op on (key, offset, len) and pins the region; returns
  // where the bytes live: host memory, or with `device_ok` possibly device
  // memory (`(*region)->kind` says; the caller must not touch it with the
  // CPU). Errors: kNotFound (no remote-visible region with that key),
  // kInvalidArgument (outside the region), kPermissionDenied (access bits
  // forbid it), kUnimplemented (a device region without `device_ok`).
  Result<char*> PinRemote(std::uint64_t key, std::uint64_t offset, std::uint64_t len, bool write,
                          bool device_ok, LocalRegion** region);

  static void Unpin(LocalRegion* region) { region->pins.fetch_sub(1, std::memory_order_release); }

  // The remote-visible regions and the table version.
  RegionTable Snapshot() const;

 private:
  mutable SharedMutex mu_;
  std::uint64_t version_ SLUICE_GUARDED_BY(mu_) = 0;
  std::map<std::uintptr_t, std::unique_ptr<LocalRegion>> by_addr_ SLUICE_GUARDED_BY(mu_);
  std::unordered_map<std::uint64_t, LocalRegion*> by_key_ SLUICE_GUARDED_BY(mu_);
};

}  // namespace sluice::internal

#endif  // SLUICE_TRANSFER_REGION_TABLE_H_
