// shm as a transport, for peers on this host: the initiator copies itself,
// through a mapping of the peer's shared allocation (memfd) or with
// process_vm_readv/writev, on the engine's copy threads, in chunks several
// threads can share. Host memory at both ends; maps shared allocations for
// zero-copy reads.
#ifndef SLUICE_TRANSFER_SHM_SHM_TRANSPORT_H_
#define SLUICE_TRANSFER_SHM_SHM_TRANSPORT_H_

#include <memory>

#include "transfer/transport.h"

namespace sluice::internal {

// `copy_threads`: threads of the copy pool (EngineConfig::io_threads).
std::unique_ptr<Transport> MakeShmTransport(int copy_threads);

}  // namespace sluice::internal

#endif  // SLUICE_TRANSFER_SHM_SHM_TRANSPORT_H_
