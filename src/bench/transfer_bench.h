// `sluice bench transfer`: throughput and batch latency of the transfer
// engine between two processes on loopback, against a baseline measured in
// the same run on the same bytes (shm: one-thread memcpy between warm
// buffers as large as the engine's; tcp: one plain blocking socket streaming
// blocks of the same size over loopback; device memory at either end: the
// device backend's own copies between buffers of the same kinds in this
// process, a batch queued on one stream then waited for). The baseline runs
// for half the duration before the engine and half after; the better half
// is reported.
#ifndef SLUICE_BENCH_TRANSFER_BENCH_H_
#define SLUICE_BENCH_TRANSFER_BENCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "sluice/status.h"
#include "sluice/transfer/engine.h"

namespace sluice::bench {

struct TransferBenchOptions {
  // "tcp", "shm", "ucx" (host memory) or "devipc" (to and from a same-host peer's
  // device memory). tcp with device memory stages it through pinned slots.
  std::string transport = "tcp";
  OpKind op = OpKind::kWrite;
  std::uint64_t block_size = std::uint64_t{16} << 20;
  int batch = 8;
  int threads = 1;
  double duration_s = 3;
  int io_threads = 2;
  int connections = 4;
  std::uint64_t slice_size = std::uint64_t{1} << 20;
  // Also run a second target and engine that derive their secret from a
  // cluster credential (a token made for the run), alternating rounds with
  // the open pair: what the credential costs.
  bool credential_ab = false;
  // Also run a pair with a credential and encrypted payload
  // (EngineConfig::encrypt_data), in the same alternating rounds: what
  // encryption costs. tcp only.
  bool encrypt_ab = false;
  // Where the bytes come from and go to: "host" or "device" memory (of the
  // `device` backend, "sim" or "cuda", device 0 on each side); for a read
  // the source is the target's.
  std::string src_kind = "host";
  std::string dst_kind = "host";
  std::string device = "sim";
  // The target on another host: started in network namespace
  // `target_netns` (`ip netns exec`; empty: this one), listening (engine
  // and baseline socket) on IPv4 `target_address`, which this process
  // dials. tcp only.
  std::string target_netns;
  std::string target_address = "127.0.0.1";
};

struct TransferBenchResult {
  TransferBenchOptions options;
  double gbps = 0;           // Engine throughput, 10^9 bytes per second.
  double baseline_gbps = 0;  // Baseline throughput, same unit.
  double batch_p50_us = 0;
  double batch_p99_us = 0;
  std::uint64_t batches = 0;
  std::uint64_t bytes = 0;
  // With credential_ab: the pair with the credential.
  double credential_gbps = 0;
  double credential_p50_us = 0;
  double credential_p99_us = 0;
  // With encrypt_ab: the pair with the credential and encrypted payload.
  double encrypted_gbps = 0;
  double encrypted_p50_us = 0;
  double encrypted_p99_us = 0;
  // Bytes each of this side's transports carried (what moved which way).
  std::vector<TransportStats> transports;
};

// Checks ranges and the memory the run needs. Errors: kInvalidArgument.
Status ValidateOptions(const TransferBenchOptions& o);

// Spawns the target (`self_exe bench transfer-target ...`), measures the
// baseline, then the engine. Errors from the engine or the target process.
Result<TransferBenchResult> RunTransferBench(const TransferBenchOptions& o,
                                             const std::string& self_exe);

// The target process: registers `region_size` bytes (from AllocateShared
// when `shared`; device memory of the `device` backend when that is not
// empty), serves the baseline socket, prints
// "READY <endpoint> <key> <baseline_port>" and runs until stdin closes.
// With `token_file`, its engine's secret derives from that cluster token.
// It listens on IPv4 `listen_address`; with `encrypt` (and a token) it
// takes only encrypted payload; with `ucx` it runs ucx beside tcp and shm.
int RunTransferTarget(std::uint64_t region_size, bool shared, int io_threads,
                      const std::string& token_file, const std::string& device,
                      const std::string& listen_address = "127.0.0.1", bool encrypt = false,
                      bool ucx = false);

std::string ToJson(const TransferBenchResult& r);
std::string ToText(const TransferBenchResult& r);

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_TRANSFER_BENCH_H_
