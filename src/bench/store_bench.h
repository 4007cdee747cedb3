// `sluice bench store`: put or get throughput and latency through the store
// (master + one store node as helper processes), against the transfer engine
// moving the same bytes with raw batches in the same run.
#ifndef SLUICE_BENCH_STORE_BENCH_H_
#define SLUICE_BENCH_STORE_BENCH_H_

#include <cstdint>
#include <string>

#include "sluice/status.h"

namespace sluice::bench {

struct StoreBenchOptions {
  std::uint64_t value_size = std::uint64_t{16} << 20;
  std::string op = "put";  // "put" or "get".
  // The client's engine: "shm" (same host), "tcp" or "ucx" (the node runs it too).
  std::string transport = "shm";
  int clients = 1;  // Client threads.
  double duration_s = 3;
  // Also run a second store whose master, node and client carry a cluster
  // credential (a token made for the run), alternating rounds with the
  // open one: what the credential costs.
  bool credential_ab = false;
  // Also run a store whose master has durable commits (a put is answered
  // once its node acknowledged it), alternating rounds likewise: what a
  // master failover that loses nothing costs each put.
  bool durable_ab = false;
  // Run the master, the store node and the raw target in this network
  // namespace (another host on this machine), listening on
  // `target_address`; tcp only. The run then also measures a plain socket
  // on the same link (socket_gbps, socket_ratio).
  std::string target_netns;
  std::string target_address = "127.0.0.1";
};

struct StoreBenchResult {
  StoreBenchOptions options;
  double ops_per_s = 0;
  double gbps = 0;      // 10^9 bytes per second through the store.
  double raw_gbps = 0;  // The engine alone, same bytes, same transport.
  double p50_us = 0;
  double p99_us = 0;
  double raw_p50_us = 0;  // The raw engine ops', for comparison.
  double raw_p99_us = 0;
  // With credential_ab: the store with the credential.
  double credential_gbps = 0;
  double credential_p50_us = 0;
  double credential_p99_us = 0;
  // With durable_ab: the store with durable commits.
  double durable_gbps = 0;
  double durable_p50_us = 0;
  double durable_p99_us = 0;
  // With target_netns: one plain TCP connection on the same link.
  double socket_gbps = 0;
};

// Errors: kInvalidArgument for out-of-range options.
Status ValidateStoreOptions(const StoreBenchOptions& o);
Result<StoreBenchResult> RunStoreBench(const StoreBenchOptions& o, const std::string& self_exe);
std::string ToJson(const StoreBenchResult& r);

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_STORE_BENCH_H_
