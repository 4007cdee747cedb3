// Step-level continuous batching of one denoise worker's jobs (issue 36,
// item 1). Each job runs its own sampler loop on its own handler thread —
// its priority, checkpoints, previews, cancellation and lease stay its own
// — and hands each step to the batcher, which runs the steps of every job
// that arrives within a short gather window as one batch
// (reference::DenoiseSteps: the denoiser's products over every job's
// tokens at once). Jobs batch with jobs of their latent shape only: each
// shape has its own gathering and its own batches, which run at the same
// time on their members' threads (an interactive image never waits on a
// video's step). A job joins before its first step and leaves after its
// last, so jobs join and leave the running batch at step boundaries: a
// new job waits at most one step, not a whole job.
//
// A step run alone is DenoiseStep's, bit for bit; in a batch it is within
// float32 rounding of that (BLAS orders its sums by the products' sizes:
// ReferenceModelsTest.ABatchOfJobsSamplesEachAsItWouldAlone), so a job's
// bytes may depend on which jobs it shared steps with.
//
// The batching itself is the public sluice::StepBatcher
// (sluice/runtime/step_batcher.h), keyed here by latent shape and running
// reference::DenoiseSteps.
//
// Thread safety: every method may be called from any thread.
#ifndef SLUICE_RUNTIME_STEP_BATCHER_H_INTERNAL_
#define SLUICE_RUNTIME_STEP_BATCHER_H_INTERNAL_

#include <chrono>
#include <cstdint>

#include "sluice/runtime/step_batcher.h"

#include "runtime/reference/pipeline.h"

namespace sluice::internal {

class StepBatcher {
 public:
  using Batcher = sluice::StepBatcher<const reference::SampleStep>;
  using Options = Batcher::Options;  // max_batch: jobs whose steps run as one batch.
  using Stats = Batcher::Stats;

  explicit StepBatcher(Options o);

  // A job's membership: from before its first step to after its last, for
  // its latent shape. While it is a member, a batch of its shape waits (up
  // to the gather window) for its next step before running without it.
  class Member {
   public:
    Member(StepBatcher* b, const reference::LatentShape& s) : m_(&b->batcher_, Key(s)) {}

   private:
    Batcher::Member m_;
  };

  // Runs `item` (one step of a member's job; its pointers must stay valid
  // until the call returns) in a batch with the steps other members of its
  // shape hand in within the gather window, and returns the number of
  // job-steps that batch held (1: alone).
  int Step(const reference::SampleStep& item);
  Stats stats() const { return batcher_.stats(); }

 private:
  static std::uint64_t Key(const reference::LatentShape& s) {
    return (static_cast<std::uint64_t>(s.t) << 40) | (static_cast<std::uint64_t>(s.h) << 20) |
           static_cast<std::uint64_t>(s.w);
  }

  Batcher batcher_;
};

}  // namespace sluice::internal

#endif  // SLUICE_RUNTIME_STEP_BATCHER_H_INTERNAL_
