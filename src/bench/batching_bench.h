// `sluice bench batching`: step-level batching in the denoise pool against
// one job per slot, at equal workers, in the same run (issue 36, item 1).
// Two pairs of `bench e2e` runs of the reference workload (256² interactive
// images and 320x192x17 batch videos, 4:1): at saturation (arrivals well
// above what the deployment serves) the throughput with denoise workers
// batching up to `batch` jobs over that without; then at `load` (0.75) of
// the unbatched throughput just measured, the interactive jobs' p99 time
// to first frame, batched over unbatched.
#ifndef SLUICE_BENCH_BATCHING_BENCH_H_
#define SLUICE_BENCH_BATCHING_BENCH_H_

#include <string>

#include "sluice/status.h"

#include "bench/e2e_bench.h"

namespace sluice::bench {

struct BatchingBenchOptions {
  int workers = 3;               // Total, encode and decode on every one ("shared").
  int batch = 4;                 // Jobs per denoise worker's batch, 2..64.
  double saturation_rate = 1.0;  // Arrivals per second of the saturation runs.
  double load = 0.75;            // Of the unbatched throughput, in (0, 1].
  double duration_s = 30;        // Each run's measured arrival window.
  double warmup_s = 2;
};

struct BatchingBenchResult {
  BatchingBenchOptions options;
  E2eBenchResult saturated_plain, saturated_batched, loaded_plain, loaded_batched;
  double throughput_ratio = 0;            // Batched over unbatched, at saturation.
  double interactive_p99_ttff_ratio = 0;  // Batched over unbatched, at `load`.
};

// Errors: kInvalidArgument naming a bad option; a run's.
Result<BatchingBenchResult> RunBatchingBench(const BatchingBenchOptions& o);
std::string ToJson(const BatchingBenchResult& r);

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_BATCHING_BENCH_H_
