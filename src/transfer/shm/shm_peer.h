// The initiator's shm view of one same-host peer: the peer's shared
// allocations mapped into this process (opened through /proc/<pid>/fd and
// checked by inode), and whether process_vm_readv/writev may reach the peer's
// other memory (checked once by reading the probe bytes the peer published).
#ifndef SLUICE_TRANSFER_SHM_SHM_PEER_H_
#define SLUICE_TRANSFER_SHM_SHM_PEER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "sluice/status.h"

#include "common/mutex.h"
#include "transfer/wire.h"

namespace sluice::internal {

struct PeerMapping {
  char* addr = nullptr;
  std::size_t size = 0;
  ~PeerMapping();
};

class ShmPeer {
 public:
  // Null when `remote` is on another host, or in another pid namespace.
  static std::unique_ptr<ShmPeer> Probe(const HostInfo& remote);

  std::int32_t pid() const { return pid_; }
  bool vm_ok() const { return vm_ok_; }

  // Maps the shared allocation behind `region` (once; cached by inode).
  // Errors: kUnavailable when the kernel refuses (then use vm or tcp).
  Result<std::shared_ptr<PeerMapping>> Map(const WireRegion& region);

  // Drops cached mappings whose inode no table region uses any more.
  void Retain(const RegionTable& table);

 private:
  std::int32_t pid_ = 0;
  bool vm_ok_ = false;
  Mutex mu_;
  std::map<std::uint64_t, std::shared_ptr<PeerMapping>> maps_
      SLUICE_GUARDED_BY(mu_);                                      // By memfd inode.
  std::map<std::uint64_t, Status> failed_ SLUICE_GUARDED_BY(mu_);  // Maps that did not work.
};

// One copy between this process and a same-host peer: either through a
// mapping (memcpy) or with process_vm_readv/writev. Returns kUnavailable
// (scope kEndpoint) when the peer is gone or its memory went away.
Status ShmCopy(bool write, char* local, char* mapped_remote, std::int32_t pid,
               std::uint64_t remote_addr, std::uint64_t len);

}  // namespace sluice::internal

#endif  // SLUICE_TRANSFER_SHM_SHM_PEER_H_
