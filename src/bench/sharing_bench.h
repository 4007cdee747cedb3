// `sluice bench sharing`: the RFC's benchmark (c) at small scale, for
// real. An embedded deployment of `workers` profile workers is split into
// encode, N denoise and M decode pools (each worker one stage at a time,
// as a GPU is: e2e_bench.h, light stages "pools"), swept over M at one
// load; the same arrivals are served colocated on as many workers. Each
// point is run, replayed in the simulator, or both (e2e_sim.h), and held
// against the SLO: the fewest decode workers that meet it give the best
// N:M at this load.
#ifndef SLUICE_BENCH_SHARING_BENCH_H_
#define SLUICE_BENCH_SHARING_BENCH_H_

#include <optional>
#include <string>
#include <vector>

#include "sluice/status.h"

#include "bench/e2e_bench.h"
#include "bench/e2e_sim.h"

namespace sluice::bench {

struct SharingBenchOptions {
  // The run at every point (workload, workers, rate, duration, warm-up,
  // time factor, encode_workers); mode and decode_workers are the sweep's.
  E2eBenchOptions run;
  std::vector<int> decode_workers = {1, 2, 3};  // M at each point, ascending.
  // The SLO, in the run's seconds (published timings × time factor): p99
  // TTFF (the interactive jobs' in the mixed workload) and, when > 0, p99
  // latency of every job. Every measured job must also succeed.
  double slo_ttff_p99_s = 1;
  double slo_latency_p99_s = 0;
  std::string simulate = "both";  // measured | simulated | both
  E2eSimOptions sim;
};

struct SharingPoint {
  std::string mode;  // "disagg" or "colocated".
  int denoise_workers = 0, decode_workers = 0;
  std::optional<E2eBenchResult> measured, simulated;
  bool measured_meets = false, simulated_meets = false;
};

struct SharingBenchResult {
  SharingBenchOptions options;
  std::vector<SharingPoint> points;  // Disaggregated by M, then colocated.
  // The fewest decode workers meeting the SLO (0: none does), measured
  // and simulated.
  int fewest_decode_measured = 0, fewest_decode_simulated = 0;
};

// Errors: kInvalidArgument naming the bad option (the run's, an M that
// leaves no denoise worker, an SLO not > 0).
Status ValidateSharingOptions(const SharingBenchOptions& o);

// Runs (and/or replays) every point, one after the other.
Result<SharingBenchResult> RunSharingBench(const SharingBenchOptions& o);
std::string ToJson(const SharingBenchResult& r);

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_SHARING_BENCH_H_
