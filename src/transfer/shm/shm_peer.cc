#include "transfer/shm/shm_peer.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstring>
#include <set>

#include "common/log.h"
#include "common/mutex.h"
#include "common/net.h"

namespace sluice::internal {

PeerMapping::~PeerMapping() {
  if (addr != nullptr) {
    ::munmap(addr, size);
  }
}

std::unique_ptr<ShmPeer> ShmPeer::Probe(const HostInfo& remote) {
  if (!HostInfo::Self().SameHostAs(remote)) {
    return nullptr;
  }
  auto peer = std::make_unique<ShmPeer>();
  peer->pid_ = remote.pid;
  std::array<std::uint8_t, 16> seen{};
  iovec local{seen.data(), seen.size()};
  iovec rem{reinterpret_cast<void*>(remote.probe_addr), seen.size()};
  const ssize_t n = ::process_vm_readv(remote.pid, &local, 1, &rem, 1, 0);
  peer->vm_ok_ = n == static_cast<ssize_t>(seen.size()) && seen == remote.probe;
  if (!peer->vm_ok_) {
    // Same boot and pid namespace but the probe differs or the kernel says
    // no (ptrace rules): shared allocations may still map; the rest goes tcp.
    SLUICE_LOG(debug, "process_vm access to pid {} unavailable: {}", remote.pid,
               n < 0 ? strerror(errno) : "probe mismatch");
  }
  return peer;
}

Result<std::shared_ptr<PeerMapping>> ShmPeer::Map(const WireRegion& region) {
  MutexLock lock(mu_);
  auto it = maps_.find(region.memfd_inode);
  if (it != maps_.end()) {
    return it->second;
  }
  auto f = failed_.find(region.memfd_inode);
  if (f != failed_.end()) {
    return f->second;
  }
  const std::string path = "/proc/" + std::to_string(pid_) + "/fd/" + std::to_string(region.memfd);
  auto fail = [&](std::string why) SLUICE_REQUIRES(mu_) -> Status {
    Status s =
        UnavailableError("cannot map peer memory " + path + ": " + why, FailureScope::kTransport);
    failed_[region.memfd_inode] = s;
    return s;
  };
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (!fd.valid()) {
    return fail(strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || st.st_ino != region.memfd_inode ||
      static_cast<std::uint64_t>(st.st_size) < region.memfd_size) {
    return fail("file is not the peer's shared allocation");
  }
  void* p = ::mmap(nullptr, region.memfd_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                   fd.get(), 0);
  if (p == MAP_FAILED) {
    return fail(strerror(errno));
  }
  auto m = std::make_shared<PeerMapping>();
  m->addr = static_cast<char*>(p);
  m->size = region.memfd_size;
  maps_[region.memfd_inode] = m;
  return m;
}

void ShmPeer::Retain(const RegionTable& table) {
  std::set<std::uint64_t> live;
  for (const WireRegion& r : table.regions) {
    if (r.info.shared) {
      live.insert(r.memfd_inode);
    }
  }
  MutexLock lock(mu_);
  for (auto it = maps_.begin(); it != maps_.end();) {
    it = live.count(it->first) != 0 ? std::next(it) : maps_.erase(it);
  }
}

Status ShmCopy(bool write, char* local, char* mapped_remote, std::int32_t pid,
               std::uint64_t remote_addr, std::uint64_t len) {
  if (mapped_remote != nullptr) {
    if (write) {
      std::memcpy(mapped_remote, local, len);
    } else {
      std::memcpy(local, mapped_remote, len);
    }
    return Status::Ok();
  }
  while (len > 0) {
    iovec l{local, static_cast<std::size_t>(len)};
    iovec r{reinterpret_cast<void*>(remote_addr), static_cast<std::size_t>(len)};
    const ssize_t n = write ? ::process_vm_writev(pid, &l, 1, &r, 1, 0)
                            : ::process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (n <= 0) {
      const int err = n < 0 ? errno : EFAULT;
      return UnavailableError(std::string("shm copy with peer pid ") + std::to_string(pid) +
                                  " failed: " + strerror(err),
                              FailureScope::kEndpoint);
    }
    local += n;
    remote_addr += static_cast<std::uint64_t>(n);
    len -= static_cast<std::uint64_t>(n);
  }
  return Status::Ok();
}

}  // namespace sluice::internal
