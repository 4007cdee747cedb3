// `sluice bench step-cache`: what the denoiser's step cache (pipeline.h's
// StepCache) buys and costs on the reference model. Captioned scenes of a
// split (scenes.h) are generated in one process on one thread, each first
// with every block run and then at each threshold, back to back (so the
// machine's noise falls on all alike); every output is scored by the
// analyser that inverts the scene generator. Per threshold: the speed-up
// of the denoise loop (its summed time without the cache over with it),
// the share of steps that skipped the blocks, and the prompt adherence
// (the mean of colour, shape, position and background accuracy) lost
// against the uncached outputs of the same run.
#ifndef SLUICE_BENCH_STEP_CACHE_BENCH_H_
#define SLUICE_BENCH_STEP_CACHE_BENCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "sluice/status.h"

namespace sluice::bench {

struct StepCacheBenchOptions {
  int prompts = 32;
  std::string split = "heldout";  // train | heldout
  std::uint64_t seed = 7;
  int steps = 12;
  float guidance = 4.0f;
  std::vector<float> thresholds = {0.1f, 0.2f};
};

struct StepCacheFigures {
  float threshold = 0;        // 0: the uncached baseline.
  double denoise_ms = 0;      // Summed over the prompts.
  double speedup = 1;         // Baseline denoise_ms / this one's.
  double skipped_share = 0;   // Steps that skipped the blocks / all steps.
  double accuracy = 0;        // Mean of the four attribute accuracies.
  double accuracy_drop = 0;   // Baseline accuracy minus this one's.
  double mean_abs_pixel = 0;  // Mean |pixel - baseline pixel|, 0..255.
};

struct StepCacheBenchResult {
  StepCacheBenchOptions options;
  StepCacheFigures baseline;
  std::vector<StepCacheFigures> cached;  // One per threshold, in order.
};

// Errors: kInvalidArgument naming a bad option (prompts 1..1000, steps
// 1..1000, guidance 0..30, thresholds in (0, StepCache::kMaxThreshold],
// at least one, at most 8; the split).
Result<StepCacheBenchResult> RunStepCacheBench(const StepCacheBenchOptions& o);
std::string ToJson(const StepCacheBenchResult& r);

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_STEP_CACHE_BENCH_H_
