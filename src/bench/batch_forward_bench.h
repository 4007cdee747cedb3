// `sluice bench batch-forward`: what running jobs' denoise steps as one
// batch buys the reference denoiser on this machine's CPU. For each batch
// size B, B jobs (different prompts and seeds, 128x128) take their steps
// together (reference::DenoiseSteps, batched: the blocks' products run over
// every job's tokens at once) and one at a time (the same call unbatched),
// alternating which goes first, in one process on one thread. The figure
// per B is the job-steps per second batched over unbatched: the ceiling of
// what step-level batching in the denoise pool can gain here (issue 36,
// item 1; the serving-level benchmark comes with the scheduler's batches).
//
// With `adapters` k > 0 (issue 36, item 2: a batch of jobs with different
// LoRA adapters), each size also times the batch with job j running
// adapter j mod k (random rank-`rank` adapters on every block layer):
// mixed, one batch with each sample's low-rank updates on its own rows
// (S-LoRA / Punica style), and grouped, one batch per adapter; both
// against the same batch without adapters.
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
  int adapters = 0;  // Distinct adapters among a batch's jobs (0: none), 0..16.
  int rank = 8;      // Their rank, 1..64.
};

struct BatchForwardFigures {
  int batch = 1;
  double batched_steps_per_s = 0;    // Job-steps per second, batched.
  double unbatched_steps_per_s = 0;  // Job-steps per second, one job at a time.
  double throughput_ratio = 0;       // batched / unbatched.
  double max_latent_diff = 0;        // Largest |batched - unbatched| after the rounds.
  // With adapters: job-steps per second of the batch mixing them (one
  // DenoiseSteps call) and grouped by adapter (one call per adapter), and
  // each over the batched rate without adapters.
  double mixed_steps_per_s = 0, grouped_steps_per_s = 0;
  double mixed_over_plain = 0, grouped_over_plain = 0, mixed_over_grouped = 0;
};

struct BatchForwardBenchResult {
  BatchForwardBenchOptions options;
  std::vector<BatchForwardFigures> sizes;
};

// Errors: kInvalidArgument naming a bad option (batch sizes 1..64, at most
// 8 of them; rounds 1..1000; size as a request's; adapters 0..16, rank
// 1..64).
Result<BatchForwardBenchResult> RunBatchForwardBench(const BatchForwardBenchOptions& o);
std::string ToJson(const BatchForwardBenchResult& r);

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_BATCH_FORWARD_BENCH_H_
