// Step-level continuous batching of one denoise worker's jobs (issue 36,
// item 1). Each job runs its own sampler loop on its own handler thread —
// its priority, checkpoints, previews, cancellation and lease stay its own
// — and hands each step to the batcher, which runs the steps of every job
// that arrives within a short gather window as one batch
// (reference::DenoiseSteps: the denoiser's products over every job's
// tokens at once; jobs of other latent shapes go as batches of their own).
// A job joins before its first step and leaves after its last, so jobs
// join and leave the running batch at step boundaries: a new job waits at
// most one step, not a whole job.
//
// A step run alone is DenoiseStep's, bit for bit; in a batch it is within
// float32 rounding of that (BLAS orders its sums by the products' sizes:
// ReferenceModelsTest.ABatchOfJobsSamplesEachAsItWouldAlone), so a job's
// bytes may depend on which jobs it shared steps with.
//
// Thread safety: every method may be called from any thread.
#ifndef SLUICE_RUNTIME_STEP_BATCHER_H_
#define SLUICE_RUNTIME_STEP_BATCHER_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "runtime/reference/pipeline.h"

namespace sluice::internal {

class StepBatcher {
 public:
  struct Options {
    int max_batch = 8;  // Jobs whose steps run as one batch, 2..64.
    // How long the first step to arrive waits for the other members'
    // (those between steps: saving a checkpoint, making a preview).
    std::chrono::microseconds gather{5000};
  };
  struct Stats {
    std::uint64_t batches = 0, steps = 0;  // Batches run, job-steps in them.
    int largest = 0;                       // The most job-steps in one batch.
  };

  explicit StepBatcher(Options o) : o_(o) {}

  // A job's membership: from before its first step to after its last.
  // While it is a member, the batcher waits (up to the gather window) for
  // its next step before running a batch without it.
  class Member {
   public:
    explicit Member(StepBatcher* b) : b_(b) { b_->Join(); }
    ~Member() { b_->Leave(); }
    Member(const Member&) = delete;
    Member& operator=(const Member&) = delete;

   private:
    StepBatcher* b_;
  };

  // Runs `item` (one step of a member's job; its pointers must stay valid
  // until the call returns) in a batch with the steps other members hand
  // in within the gather window, and returns the number of job-steps that
  // batch held (1: alone).
  int Step(const reference::SampleStep& item);
  Stats stats() const;

 private:
  struct Pending {
    reference::SampleStep item;
    bool done = false;
    int batch = 0;
  };
  void Join();
  void Leave();
  // Runs `taken` (the lock released), grouped by latent shape.
  static void Run(std::vector<Pending*>& taken);

  Options o_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int members_ = 0;
  std::vector<Pending*> waiting_;  // Handed in, not yet taken, in arrival order.
  bool leading_ = false;           // A step is gathering or running a batch.
  Stats stats_;
};

}  // namespace sluice::internal

#endif  // SLUICE_RUNTIME_STEP_BATCHER_H_
