#include "transfer/shm/shared_alloc.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <limits>
#include <string>

#include "common/log.h"
#include "common/mutex.h"

namespace sluice::internal {
namespace {

// MemAvailable from /proc/meminfo in bytes, or 0 when unknown.
std::uint64_t AvailableMemory() {
  std::ifstream f("/proc/meminfo");
  std::string name;
  std::uint64_t kib = 0;
  std::string unit;
  while (f >> name >> kib) {
    std::getline(f, unit);
    if (name == "MemAvailable:") {
      return kib * 1024;
    }
  }
  return 0;
}

}  // namespace

SharedAllocation::~SharedAllocation() {
  if (addr != nullptr && ::munmap(addr, size) != 0) {
    SLUICE_LOG(warn, "munmap of shared allocation failed: {}", strerror(errno));
  }
  if (memfd >= 0) {
    ::close(memfd);
  }
}

Result<std::shared_ptr<SharedAllocation>> SharedAllocator::Allocate(std::size_t len) {
  if (len == 0) {
    return InvalidArgumentError("AllocateShared: length must be > 0");
  }
  constexpr std::size_t kAlign = std::size_t{2} << 20;
  if (len > std::numeric_limits<std::size_t>::max() - kAlign) {
    return ResourceExhaustedError("AllocateShared: " + std::to_string(len) + " bytes is too large");
  }
  const std::size_t size = (len + kAlign - 1) / kAlign * kAlign;
  // Pre-faulting more than the host can give would end in the OOM killer
  // or a SIGBUS, not in an error: refuse up front.
  const std::uint64_t available = AvailableMemory();
  if (available > 0 && size > available) {
    return ResourceExhaustedError("AllocateShared: " + std::to_string(size) + " bytes asked, " +
                                  std::to_string(available) +
                                  " available on this host (MemAvailable)");
  }
  auto alloc = std::make_shared<SharedAllocation>();
  alloc->memfd = ::memfd_create("sluice-shared", MFD_CLOEXEC);
  if (alloc->memfd < 0) {
    return ResourceExhaustedError(std::string("memfd_create: ") + strerror(errno));
  }
  if (::ftruncate(alloc->memfd, static_cast<off_t>(size)) != 0) {
    return ResourceExhaustedError(std::string("ftruncate memfd: ") + strerror(errno));
  }
  struct stat st {};
  ::fstat(alloc->memfd, &st);
  alloc->inode = st.st_ino;
  // Reserve with the hugepage hint before populating so the kernel can back
  // it with huge pages when shmem THP allows; then populate (pre-fault).
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, alloc->memfd, 0);
  if (p == MAP_FAILED) {
    return ResourceExhaustedError(std::string("mmap memfd: ") + strerror(errno));
  }
  alloc->addr = p;
  alloc->size = size;
  (void)::madvise(p, size, MADV_HUGEPAGE);  // Best effort; not all kernels allow it.
  if (::madvise(p, size, MADV_POPULATE_WRITE) != 0) {
    if (errno != EINVAL) {
      // No memory behind the file (ENOMEM, or EFAULT where a page could
      // not be had): touching the pages would SIGBUS the process instead.
      return ResourceExhaustedError("cannot pre-fault " + std::to_string(size) +
                                    " bytes of shared memory: " + strerror(errno));
    }
    // Kernels before 5.14 lack MADV_POPULATE_WRITE: touch every page.
    for (std::size_t off = 0; off < size; off += 4096) {
      static_cast<volatile char*>(p)[off] = 0;
    }
  }
  MutexLock lock(mu_);
  for (auto it = live_.begin(); it != live_.end();) {  // Prune freed ones.
    it = it->second.expired() ? live_.erase(it) : std::next(it);
  }
  live_[reinterpret_cast<std::uintptr_t>(p)] = alloc;
  return alloc;
}

std::shared_ptr<SharedAllocation> SharedAllocator::Find(const void* addr, std::size_t len) {
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  MutexLock lock(mu_);
  auto it = live_.upper_bound(a);
  if (it == live_.begin()) {
    return nullptr;
  }
  --it;
  std::shared_ptr<SharedAllocation> alloc = it->second.lock();
  if (alloc == nullptr) {
    return nullptr;
  }
  const auto start = reinterpret_cast<std::uintptr_t>(alloc->addr);
  if (a >= start && a + len <= start + alloc->size) {
    return alloc;
  }
  return nullptr;
}

}  // namespace sluice::internal
