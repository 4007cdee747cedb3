// The initiator's shm view of one same-host peer: the peer's shared
// allocations mapped into this process (opened through /proc/<pid>/fd and
// checked by inode), and whether process_vm_readv/writev may reach the peer's
// other memory (checked once by reading the probe bytes the peer published).
#ifndef SLUICE_TRANSFER_SHM_SHM_PEER_H_
#define SLUICE_TRANSFER_SHM_SHM_PEER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>

#include "sluice/status.h"

#include "common/mutex.h"
#include "transfer/shm/shared_alloc.h"
#include "transfer/wire.h"

namespace sluice::internal {

// Where a region lies in its owner's shared allocation: what a same-host
// peer needs to map it. Packed into a transport's blob by the transports
// that map shared allocations (shm, devipc).
struct SharedRef {
  std::int32_t memfd = -1;   // fd number in the owner.
  std::uint64_t offset = 0;  // Region start within the memfd.
  std::uint64_t size = 0;    // The whole allocation.
  std::uint64_t inode = 0;   // Lets the peer check it opened the right file.
};
inline constexpr std::size_t kSharedRefBytes = 28;

// The reference of the region at `addr` in `alloc`.
SharedRef RefOf(const SharedAllocation& alloc, const char* addr);
// Appends the kSharedRefBytes of `ref` to `out`.
void AppendSharedRef(const SharedRef& ref, std::string* out);
// Reads kSharedRefBytes from the front of `in` (and drops them); false when
// too short. The values are a peer's: Map checks them.
bool ReadSharedRef(std::string_view* in, SharedRef* ref);

// The shm transport's name, under which it publishes a region's SharedRef.
inline constexpr std::string_view kShmTransportName = "shm";
// The SharedRef a peer running shm published for `region` (devipc maps the
// same allocations); false when none or malformed.
bool PublishedSharedRef(const WireRegion& region, SharedRef* ref);

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

  // Maps the shared allocation `ref` names (once; cached by inode).
  // Errors: kUnavailable when the kernel refuses (then use vm or tcp).
  Result<std::shared_ptr<PeerMapping>> Map(const SharedRef& ref);

  // Drops cached mappings whose inode is not in `live`.
  void Retain(const std::set<std::uint64_t>& live);

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
