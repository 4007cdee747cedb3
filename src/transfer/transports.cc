// The factory table: the one place that names every transport. A new
// transport is a directory of its own plus one entry here.
#include <algorithm>
#include <array>

#include "transfer/device/devipc_transport.h"
#include "transfer/region_table.h"
#include "transfer/shm/shm_transport.h"
#include "transfer/tcp/tcp_transport.h"
#include "transfer/transport.h"
#include "transfer/ucx/ucx_transport.h"

namespace sluice::internal {
namespace {

// Bandwidths and latencies from docs/benchmarks/transfer.md, the 2-core
// reference host, host memory both ends, one initiator thread: bandwidth
// of 16 MiB writes in batches of 8, latency the p50 of one 4 KiB write.
const std::array<TransportFactory, 4> kFactories{{
    {
        .name = "shm",
        .summary = "same host: shared allocations mapped, other memory by process_vm",
        .bandwidth_gbps = 14.1,
        .latency_us = 73,
        .make = [](const EngineConfig& c, device::DeviceBackend*)
            -> Result<std::unique_ptr<Transport>> { return MakeShmTransport(c.io_threads); },
    },
    {
        .name = "devipc",
        .summary = "same host: device memory by the device backend's IPC handles",
        .listed = false,
        // Device copies by the backend (not measured on host memory, which
        // it does not move alone): ranked just after shm, which never takes
        // device memory, so the two never compete for an op.
        .bandwidth_gbps = 14.0,
        .latency_us = 73,
        .implied =
            [](const EngineConfig& c, const device::DeviceBackend* backend) {
              return backend != nullptr && c.device_ipc;
            },
        .make =
            [](const EngineConfig& c, device::DeviceBackend* backend) {
              return MakeDevIpcTransport(backend, c.io_threads, c.op_timeout);
            },
    },
    {
        .name = "ucx",
        .summary = "any host: one-sided reads and writes by UCX (its tcp, shared memory, RDMA)",
        // By UCX_TLS (UcxRank): over UCX's shared memory 9.1 GB/s; over
        // its tcp 2.6, below the engine's tcp (enable ucx for a fabric
        // UCX does better, RDMA).
        .bandwidth_gbps = 9.1,
        .latency_us = 73,
        .rank = UcxRank,
        .make = [](const EngineConfig& c, device::DeviceBackend*) { return MakeUcxTransport(c); },
    },
    {
        .name = "tcp",
        .summary = "any host: the engine's pooled connections, ops cut into slices",
        .bandwidth_gbps = 4.9,
        .latency_us = 51,
        .make = [](const EngineConfig& c,
                   device::DeviceBackend* backend) -> Result<std::unique_ptr<Transport>> {
          return MakeTcpTransport(c.slice_size, backend != nullptr, backend, c.op_timeout);
        },
        .serve = ServeTcp,
    },
}};

const TransportFactory* FindFactory(std::string_view name) {
  for (const TransportFactory& f : kFactories) {
    if (f.name == name) {
      return &f;
    }
  }
  return nullptr;
}

}  // namespace

Result<PeerMemory> TransportPath::Map(const WireRegion& /*region*/, std::uint64_t /*offset*/,
                                      std::uint64_t /*length*/) {
  return UnimplementedError(std::string(transport().name()) + " does not map peer memory");
}

bool OpFitsPeerRegion(const OpQuery& q, Status* failure) {
  const RegionInfo& info = q.remote->info;
  Status range = CheckRange(info.length, info.access, q.op.remote_offset, q.op.length,
                            q.op.kind == OpKind::kWrite);
  if (!range.ok()) {
    *failure = std::move(range);
    return false;
  }
  return true;
}

std::span<const TransportFactory> TransportFactories() {
  return kFactories;
}

std::string ListedTransportNames() {
  std::string out;
  for (const TransportFactory& f : kFactories) {
    if (f.listed) {
      out += (out.empty() ? "" : ", ") + std::string(f.name);
    }
  }
  return out;
}

Result<std::vector<std::unique_ptr<Transport>>> MakeTransports(const EngineConfig& config,
                                                               device::DeviceBackend* backend) {
  std::vector<const TransportFactory*> chosen;
  for (const std::string& t : config.transports) {
    const TransportFactory* f = FindFactory(t);
    if (f == nullptr || !f->listed) {
      return InvalidArgumentError("config.transports: unknown transport '" + t + "' (want " +
                                  ListedTransportNames() + ")");
    }
    if (std::find(chosen.begin(), chosen.end(), f) == chosen.end()) {
      chosen.push_back(f);
    }
  }
  if (chosen.empty()) {
    return InvalidArgumentError("config.transports: enable at least one of " +
                                ListedTransportNames());
  }
  for (const TransportFactory& f : kFactories) {
    if (!f.listed && f.implied != nullptr && f.implied(config, backend)) {
      chosen.push_back(&f);
    }
  }
  if (chosen.size() > kMaxTransports) {
    return InvalidArgumentError("config.transports: at most " + std::to_string(kMaxTransports));
  }
  // The rank: faster paths first (each by its figures for this process's
  // fabric); the table's order breaks ties.
  struct Ranked {
    const TransportFactory* f;
    double gbps, us;
  };
  std::vector<Ranked> ranked;
  for (const TransportFactory* f : chosen) {
    Ranked r{f, f->bandwidth_gbps, f->latency_us};
    if (f->rank != nullptr) {
      f->rank(&r.gbps, &r.us);
    }
    ranked.push_back(r);
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const Ranked& a, const Ranked& b) {
    return a.gbps != b.gbps ? a.gbps > b.gbps : a.us < b.us;
  });
  for (std::size_t i = 0; i < ranked.size(); ++i) {
    chosen[i] = ranked[i].f;
  }
  std::vector<std::unique_ptr<Transport>> out;
  for (const TransportFactory* f : chosen) {
    Result<std::unique_ptr<Transport>> made = f->make(config, backend);
    if (!made.ok()) {
      return made.status().WithContext("transport " + std::string(f->name));
    }
    out.push_back(std::move(*made));
  }
  return out;
}

}  // namespace sluice::internal
