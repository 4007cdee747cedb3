// "devipc": device memory between processes (or engines) on one host. The
// target publishes an IPC handle of each device allocation it registered
// with remote access (in its blob of the region); the initiator opens it once with
// the same device backend (one mapping per peer allocation, kept until the
// peer's table drops it and no copy still uses it) and moves bytes with the
// backend's asynchronous copies -- host or device memory here, the peer's
// device memory there -- on its own copy threads, each with a stream (ops
// cut into 4 MiB chunks spread over them). An op completes when the events
// recorded after its chunks' copies are reached, so a notify sent after it
// finds the bytes in place.
//
// It also carries device memory here to and from a same-host peer's shared
// host allocations (the memfd memory shm maps, a store node's segments):
// the backend copies straight between the device and the mapping, so a
// device tensor reaches a node's memory in one hop. It maps those
// allocations itself (a second mapping beside shm's, made at the first
// device op). Host memory at both ends is left to shm.
#ifndef SLUICE_TRANSFER_DEVICE_DEVIPC_TRANSPORT_H_
#define SLUICE_TRANSFER_DEVICE_DEVIPC_TRANSPORT_H_

#include <chrono>
#include <memory>

#include "device/backend.h"
#include "transfer/transport.h"

namespace sluice::internal {

// `backend` outlives the transport (a process backend does). `copy_threads`
// (1..64) each own one stream; `op_timeout` bounds one copy's wait.
Result<std::unique_ptr<Transport>> MakeDevIpcTransport(device::DeviceBackend* backend,
                                                       int copy_threads,
                                                       std::chrono::milliseconds op_timeout);

}  // namespace sluice::internal

#endif  // SLUICE_TRANSFER_DEVICE_DEVIPC_TRANSPORT_H_
