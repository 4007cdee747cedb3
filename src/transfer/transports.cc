// The one place that names transports: EngineConfig::transports to objects.
#include <algorithm>

#include "transfer/device/devipc_transport.h"
#include "transfer/shm/shm_transport.h"
#include "transfer/tcp/tcp_transport.h"
#include "transfer/transport.h"

namespace sluice::internal {

Result<PeerMemory> TransportPath::Map(const WireRegion& /*region*/, std::uint64_t /*offset*/,
                                      std::uint64_t /*length*/) {
  return UnimplementedError(std::string(transport().name()) + " does not map peer memory");
}

Result<std::vector<std::unique_ptr<Transport>>> MakeTransports(const EngineConfig& config,
                                                               device::DeviceBackend* backend) {
  std::vector<std::unique_ptr<Transport>> out;
  for (const std::string& t : config.transports) {
    std::unique_ptr<Transport> made;
    if (t == "tcp") {
      made = MakeTcpTransport(config.slice_size, backend != nullptr);
    } else if (t == "shm") {
      made = MakeShmTransport(config.io_threads);
    } else {
      return InvalidArgumentError("config.transports: unknown transport '" + t +
                                  "' (want tcp, shm)");
    }
    const bool listed_twice = std::any_of(
        out.begin(), out.end(), [&](const auto& have) { return have->name() == made->name(); });
    if (!listed_twice) {
      out.push_back(std::move(made));
    }
  }
  if (backend != nullptr && config.device_ipc) {  // Same-host device memory, by IPC.
    SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<Transport> devipc,
                            MakeDevIpcTransport(backend, config.io_threads, config.op_timeout));
    out.push_back(std::move(devipc));
  }
  if (out.size() > kMaxTransports) {
    return InvalidArgumentError("config.transports: at most " + std::to_string(kMaxTransports));
  }
  if (out.empty()) {
    return InvalidArgumentError("config.transports: enable at least one of tcp, shm");
  }
  return out;
}

}  // namespace sluice::internal
