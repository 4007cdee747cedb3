// Per-method latency of the master's calls (gRPC and fast lane alike),
// exported as Prometheus histograms.
#ifndef SLUICE_STORE_MASTER_RPC_STATS_H_
#define SLUICE_STORE_MASTER_RPC_STATS_H_

#include <array>
#include <cstdint>

#include "common/metrics_text.h"
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
      if (s <= kBuckets[b]) {
        ++h.buckets[b];  // Its own bucket; the exposition sums them.
        break;
      }
    }
  }

  // Appends the `sluice_master_rpc_seconds` histogram family, a sample set
  // per method.
  void Write(MetricsText& out) {
    MutexLock lock(mu_);
    out.Family("sluice_master_rpc_seconds", "Master RPC handling time.", "histogram");
    for (int m = 0; m < kCount; ++m) {
      const Hist& h = hist_[m];
      out.Histogram("sluice_master_rpc_seconds", {{"method", kNames[m]}}, kBuckets, h.buckets,
                    h.count, h.sum);
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
