// `sluice bench connector`: one payload at a time through the connector
// (publish -> consume every chunk -> release) against the transfer engine
// moving the same bytes as raw batches in the same run: p2p against one
// read of the producer's tensor, store against one write into a remote
// region plus one read back (the two hops a store payload makes). Master,
// store node and the raw target run as helper processes; producer and
// consumer are two connectors (two engines) in this process.
#ifndef SLUICE_BENCH_CONNECTOR_BENCH_H_
#define SLUICE_BENCH_CONNECTOR_BENCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "sluice/status.h"

namespace sluice::bench {

struct ConnectorBenchOptions {
  std::string mode = "p2p";       // "p2p" or "store".
  std::string transport = "shm";  // Both connectors' engines: "shm" or "tcp".
  std::vector<std::int64_t> shape = {1, 16, 21, 90, 160};
  std::string dtype = "bf16";
  int chunks = 1;
  int chunk_dim = 2;
  int chunk_work_us = 0;  // The consumer's work per chunk (a sleep).
  // Benchmark (b), overlap: also time one payload made progressively — the
  // producer's last step yields chunk i `produce_us` after chunk i-1 (the
  // denoise tail; 0: all at once, as a full-attention DiT's last step) and
  // marks it ready, the consumer works on each chunk as it lands — against
  // the same payload handed over serially in the same run (published whole
  // after the tail, worked on whole after it landed). Needs chunks > 1 and
  // chunk_work_us > 0.
  bool overlap = false;
  int produce_us = 0;
  // The producer's tensor comes from DiffusionConnector::AllocateTensor
  // (p2p readers map it) instead of plain memory.
  bool shared_tensors = false;
  // The consumer reads the payload in place (ConsumeInPlace) instead of
  // copying it into dst. 1 chunk; p2p needs shared_tensors.
  bool in_place = false;
  double duration_s = 3;
  // Where the producer's and the consumer's tensors live: "cpu", or device 0
  // of the "sim" or "cuda" backend (both connectors' engines get it; the
  // raw batches move the same device memory).
  std::string device = "cpu";
  // Also run a second producer/consumer pair (and store) with a cluster
  // credential (a token made for the run), alternating rounds with the
  // open pair: what the credential costs.
  bool credential_ab = false;
};

struct ConnectorBenchResult {
  ConnectorBenchOptions options;
  std::uint64_t payload_bytes = 0;
  std::uint64_t iterations = 0;
  double gbps = 0;
  double raw_gbps = 0;
  double overhead_ratio = 0;  // Raw time / connector time.
  double p50_us = 0;          // Publish to released, per payload.
  double p99_us = 0;
  double raw_p50_us = 0;
  double ttfc_us = 0;         // p50 time from publish to the first chunk in dst.
  double ttfc_whole_us = 0;   // The same with 1 chunk, measured in this run.
  double total_whole_us = 0;  // p50 publish-to-released with 1 chunk, same run.
  std::uint64_t bytes_copied_outside_transfers = 0;
  // With overlap (p50s, microseconds): publish-to-released serially and
  // progressively; the consumer's work (chunks x chunk_work_us) and how
  // much of it the progressive hand-off hid under the transfer and the
  // producer's tail.
  double serial_us = 0;
  double progressive_us = 0;
  double work_us = 0;
  double hidden_us = 0;
  double hidden_share = 0;  // hidden_us / work_us.
  // hidden_us / the most that could hide: min(work, serial - work), the
  // shorter of the work and what came before it (tail and transfer).
  double overlap_efficiency = 0;
  // With credential_ab: the credentialed pair, publish to released.
  double credential_gbps = 0;
  double credential_p50_us = 0;
  double credential_p99_us = 0;
};

// Errors: kInvalidArgument naming the bad option.
Status ValidateConnectorOptions(const ConnectorBenchOptions& o);
Result<ConnectorBenchResult> RunConnectorBench(const ConnectorBenchOptions& o,
                                               const std::string& self_exe);
std::string ToJson(const ConnectorBenchResult& r);

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_CONNECTOR_BENCH_H_
