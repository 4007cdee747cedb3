// `sluice bench batch-forward`: what running jobs' denoise steps as one
// batch buys the reference denoiser on this machine's CPU. For each batch
// size B, B jobs (different prompts and seeds, 128x128) take their steps
// together (reference::DenoiseSteps, batched: the blocks' products run over
// every job's tokens at once) and one at a time (the same call unbatched),
// alternating which goes first, in one process on one thread. The figure
// per B is the job-steps per second batched over unbatched: the ceiling of
// what step-level batching in the denoise pool can gain here (issue 36,
// item 1; the serving-level benchmark comes with the scheduler's batches).
#ifndef SLUICE_BENCH_BATCH_FORWARD_BENCH_H_
#define SLUICE_BENCH_BATCH_FORWARD_BENCH_H_

#include <string>
#include <vector>

#include "sluice/status.h"

namespace sluice::bench {

struct BatchForwardBenchOptions {
  std::vector<int> batch_sizes = {1, 2, 4, 8};
  int rounds = 5;  // Alternating pairs of (batched, unbatched) sweeps of one step each.
  std::string size = "128x128";
};

struct BatchForwardFigures {
  int batch = 1;
  double batched_steps_per_s = 0;    // Job-steps per second, batched.
  double unbatched_steps_per_s = 0;  // Job-steps per second, one job at a time.
  double throughput_ratio = 0;       // batched / unbatched.
  double max_latent_diff = 0;        // Largest |batched - unbatched| after the rounds.
};

struct BatchForwardBenchResult {
  BatchForwardBenchOptions options;
  std::vector<BatchForwardFigures> sizes;
};

// Errors: kInvalidArgument naming a bad option (batch sizes 1..64, at most
// 8 of them; rounds 1..1000; size as a request's).
Result<BatchForwardBenchResult> RunBatchForwardBench(const BatchForwardBenchOptions& o);
std::string ToJson(const BatchForwardBenchResult& r);

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_BATCH_FORWARD_BENCH_H_
