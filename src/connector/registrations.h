// The connector's cache of engine registrations: the memory of published
// and consumed tensors is registered once and reused, both channels share it.
#ifndef SLUICE_CONNECTOR_REGISTRATIONS_H_
#define SLUICE_CONNECTOR_REGISTRATIONS_H_

#include <cstdint>
#include <map>
#include <utility>

#include "sluice/transfer/engine.h"

#include "common/mutex.h"

namespace sluice::internal {

class RegistrationCache {
 public:
  // `engine` must outlive the cache; the cache never calls it on
  // destruction (the engine drops its registrations when it goes).
  explicit RegistrationCache(TransferEngine& engine) : engine_(engine) {}

  // The region holding [data, data+len) of `kind` (on `device`, -1: the
  // one holding it) with at least `access`, registering (and dropping
  // overlapping stale registrations: that memory was freed and reused) when
  // needed. Returns the region key and the offset of `data` in it. Errors:
  // the engine's RegisterMemory errors (device memory without a backend:
  // kUnimplemented, context naming ConnectorConfig::engine.device); an
  // overlapping registration the engine still uses (context names the
  // address). Thread-safe; one lock, held across a registration.
  Result<std::pair<RegionKey, std::uint64_t>> Ensure(void* data, std::uint64_t len, Access access,
                                                     MemoryKind kind = MemoryKind::kHost,
                                                     int device = -1);
  // Drops the registration starting at `data`, if any. Idempotent.
  void Forget(const void* data);

 private:
  struct Registration {
    std::uint64_t len = 0;
    RegionKey key;
    Access access = Access::kLocalOnly;
    MemoryKind kind = MemoryKind::kHost;
  };
  TransferEngine& engine_;
  Mutex mu_;
  std::map<std::uintptr_t, Registration> regs_ SLUICE_GUARDED_BY(mu_);  // By start address.
};

}  // namespace sluice::internal

#endif  // SLUICE_CONNECTOR_REGISTRATIONS_H_
