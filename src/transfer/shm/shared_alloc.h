// memfd-backed shared memory for the shm transport. An allocation is mapped
// once in its owner, pre-faulted, and published (fd number + inode) in the
// region table so a same-host peer can open /proc/<pid>/fd/<fd> and map it.
#ifndef SLUICE_TRANSFER_SHM_SHARED_ALLOC_H_
#define SLUICE_TRANSFER_SHM_SHARED_ALLOC_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>

#include "sluice/status.h"

#include "common/mutex.h"

namespace sluice::internal {

struct SharedAllocation {
  void* addr = nullptr;
  std::size_t size = 0;
  int memfd = -1;
  std::uint64_t inode = 0;

  SharedAllocation() = default;
  SharedAllocation(const SharedAllocation&) = delete;
  SharedAllocation& operator=(const SharedAllocation&) = delete;
  ~SharedAllocation();  // Unmaps and closes.
};

// Tracks live allocations so a registration can find the one it lies in.
// Thread-safe.
class SharedAllocator {
 public:
  // Allocates `len` rounded up to 2 MiB; pre-faults every page.
  // Errors: kInvalidArgument (0), kResourceExhausted (memfd/mmap failed).
  Result<std::shared_ptr<SharedAllocation>> Allocate(std::size_t len);

  // The live allocation containing [addr, addr+len), or null.
  std::shared_ptr<SharedAllocation> Find(const void* addr, std::size_t len);

 private:
  Mutex mu_;
  std::map<std::uintptr_t, std::weak_ptr<SharedAllocation>> live_
      SLUICE_GUARDED_BY(mu_);  // By start address.
};

}  // namespace sluice::internal

#endif  // SLUICE_TRANSFER_SHM_SHARED_ALLOC_H_
