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

SharedRef RefOf(const SharedAllocation& alloc, const char* addr) {
  return SharedRef{alloc.memfd,
                   static_cast<std::uint64_t>(addr - static_cast<const char*>(alloc.addr)),
                   alloc.size, alloc.inode};
}

void AppendSharedRef(const SharedRef& ref, std::string* out) {
  const std::size_t at = out->size();
  out->resize(at + kSharedRefBytes);
  char* p = out->data() + at;
  std::memcpy(p, &ref.memfd, 4);
  std::memcpy(p + 4, &ref.offset, 8);
  std::memcpy(p + 12, &ref.size, 8);
  std::memcpy(p + 20, &ref.inode, 8);
}

bool ReadSharedRef(std::string_view* in, SharedRef* ref) {
  if (in->size() < kSharedRefBytes) {
    return false;
  }
  const char* p = in->data();
  std::memcpy(&ref->memfd, p, 4);
  std::memcpy(&ref->offset, p + 4, 8);
  std::memcpy(&ref->size, p + 12, 8);
  std::memcpy(&ref->inode, p + 20, 8);
  in->remove_prefix(kSharedRefBytes);
  return true;
}

bool PublishedSharedRef(const WireRegion& region, SharedRef* ref) {
  const std::string* blob = region.Blob(kShmTransportName);
  if (blob == nullptr) {
    return false;
  }
  std::string_view in = *blob;
  return ReadSharedRef(&in, ref) && in.empty();
}

Result<std::shared_ptr<PeerMapping>> ShmPeer::Map(const SharedRef& ref) {
  MutexLock lock(mu_);
  auto it = maps_.find(ref.inode);
  if (it != maps_.end()) {
    return it->second;
  }
  auto f = failed_.find(ref.inode);
  if (f != failed_.end()) {
    return f->second;
  }
  const std::string path = "/proc/" + std::to_string(pid_) + "/fd/" + std::to_string(ref.memfd);
  auto fail = [&](std::string why) SLUICE_REQUIRES(mu_) -> Status {
    Status s =
        UnavailableError("cannot map peer memory " + path + ": " + why, FailureScope::kTransport);
    failed_[ref.inode] = s;
    return s;
  };
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (!fd.valid()) {
    return fail(strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || st.st_ino != ref.inode ||
      static_cast<std::uint64_t>(st.st_size) < ref.size) {
    return fail("file is not the peer's shared allocation");
  }
  void* p =
      ::mmap(nullptr, ref.size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd.get(), 0);
  if (p == MAP_FAILED) {
    return fail(strerror(errno));
  }
  auto m = std::make_shared<PeerMapping>();
  m->addr = static_cast<char*>(p);
  m->size = ref.size;
  maps_[ref.inode] = m;
  return m;
}

void ShmPeer::Retain(const std::set<std::uint64_t>& live) {
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
