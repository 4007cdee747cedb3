// tcp as a transport: ops are cut into slices striped over the peer's pooled
// connections (the same ones that carry the control plane); the target's
// engine checks and serves each slice. Reaches any peer, no mapping. Host
// memory at both ends, and device memory at either: a side whose region is
// device memory stages each slice through its connection's pinned slots
// (device -> pinned -> socket -> pinned -> device), so slices on different
// connections overlap their copies with the network.
#ifndef SLUICE_TRANSFER_TCP_TCP_TRANSPORT_H_
#define SLUICE_TRANSFER_TCP_TCP_TRANSPORT_H_

#include <memory>

#include "transfer/transport.h"

namespace sluice::internal {

// `slice_size`: bytes per slice (EngineConfig::slice_size, already checked).
// `local_device`: this engine has a device backend, so its own device
// memory may be an op's local end (a target stages its own regions).
std::unique_ptr<Transport> MakeTcpTransport(std::uint64_t slice_size, bool local_device);

}  // namespace sluice::internal

#endif  // SLUICE_TRANSFER_TCP_TCP_TRANSPORT_H_
