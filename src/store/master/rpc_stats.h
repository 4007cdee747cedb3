// Per-method latency of the master's calls (gRPC and fast lane alike),
// exported as Prometheus histograms.
#ifndef SLUICE_STORE_MASTER_RPC_STATS_H_
#define SLUICE_STORE_MASTER_RPC_STATS_H_

#include <array>
#include <cstdint>
#include <sstream>

#include "common/mutex.h"
#include "store/master/master_state.h"

namespace sluice::internal {

// Per-method RPC latency, exported as Prometheus histograms.
class RpcStats {
 public:
  enum Method {
    kRegisterNode,
    kHeartbeat,
    kPutStart,
    kPutEnd,
    kPutRevoke,
    kPutReserved,
    kGetStart,
    kGetEnd,
    kRemove,
    kExists,
    kCount
  };
  static constexpr std::array<const char*, kCount> kNames = {
      "RegisterNode", "Heartbeat", "PutStart", "PutEnd", "PutRevoke",
      "PutReserved",  "GetStart",  "GetEnd",   "Remove", "Exists"};
  static constexpr std::array<double, 8> kBuckets = {25e-6,  50e-6, 100e-6, 250e-6,
                                                     500e-6, 1e-3,  1e-2,   1e-1};

  void Record(Method m, MasterClock::time_point start) {
    const double s = std::chrono::duration<double>(MasterClock::now() - start).count();
    MutexLock lock(mu_);
    Hist& h = hist_[m];
    ++h.count;
    h.sum += s;
    for (std::size_t b = 0; b < kBuckets.size(); ++b) {
      h.buckets[b] += s <= kBuckets[b] ? 1 : 0;
    }
  }

  void Write(std::ostringstream& out) {
    MutexLock lock(mu_);
    out << "# HELP sluice_master_rpc_seconds Master RPC handling time.\n"
        << "# TYPE sluice_master_rpc_seconds histogram\n";
    for (int m = 0; m < kCount; ++m) {
      const Hist& h = hist_[m];
      for (std::size_t b = 0; b < kBuckets.size(); ++b) {
        out << "sluice_master_rpc_seconds_bucket{method=\"" << kNames[m] << "\",le=\""
            << kBuckets[b] << "\"} " << h.buckets[b] << "\n";
      }
      out << "sluice_master_rpc_seconds_bucket{method=\"" << kNames[m] << "\",le=\"+Inf\"} "
          << h.count << "\n";
      out << "sluice_master_rpc_seconds_sum{method=\"" << kNames[m] << "\"} " << h.sum << "\n";
      out << "sluice_master_rpc_seconds_count{method=\"" << kNames[m] << "\"} " << h.count << "\n";
    }
  }

 private:
  struct Hist {
    std::uint64_t count = 0;
    double sum = 0;
    std::array<std::uint64_t, kBuckets.size()> buckets{};
  };
  Mutex mu_;
  std::array<Hist, kCount> hist_ SLUICE_GUARDED_BY(mu_){};
};

}  // namespace sluice::internal

#endif  // SLUICE_STORE_MASTER_RPC_STATS_H_
