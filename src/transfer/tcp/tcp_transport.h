// tcp as a transport: ops are cut into slices striped over the peer's pooled
// connections (the ones the control plane opened: its halves of them,
// op_client.h); the target's half of each connection checks and serves
// each slice (op_server.h). Reaches any peer, no mapping. Host
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
// `device` (may be null) and `timeout` (EngineConfig::op_timeout) are its
// halves' staging.
std::unique_ptr<Transport> MakeTcpTransport(std::uint64_t slice_size, bool local_device,
                                            device::DeviceBackend* device,
                                            std::chrono::milliseconds timeout);

// The target's half of an accepted connection (TransportFactory::serve).
std::unique_ptr<ConnHalf> ServeTcp(ConnPort* conn, const ServeContext& ctx);

}  // namespace sluice::internal

#endif  // SLUICE_TRANSFER_TCP_TCP_TRANSPORT_H_
