// tcp as a transport: ops are cut into slices striped over the peer's pooled
// connections (the same ones that carry the control plane); the target's
// engine checks and serves each slice. Reaches any peer, host memory at both
// ends, no mapping.
#ifndef SLUICE_TRANSFER_TCP_TCP_TRANSPORT_H_
#define SLUICE_TRANSFER_TCP_TCP_TRANSPORT_H_

#include <memory>

#include "transfer/transport.h"

namespace sluice::internal {

// `slice_size`: bytes per slice (EngineConfig::slice_size, already checked).
std::unique_ptr<Transport> MakeTcpTransport(std::uint64_t slice_size);

}  // namespace sluice::internal

#endif  // SLUICE_TRANSFER_TCP_TCP_TRANSPORT_H_
