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
// Thread safety: every method may be called from any thread.
#ifndef SLUICE_RUNTIME_STEP_BATCHER_H_
#define SLUICE_RUNTIME_STEP_BATCHER_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
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

  // A job's membership: from before its first step to after its last, for
  // its latent shape. While it is a member, a batch of its shape waits (up
  // to the gather window) for its next step before running without it.
  class Member {
   public:
    Member(StepBatcher* b, const reference::LatentShape& s) : b_(b), key_(Key(s)) {
      b_->Join(key_);
    }
    ~Member() { b_->Leave(key_); }
    Member(const Member&) = delete;
    Member& operator=(const Member&) = delete;

   private:
    StepBatcher* b_;
    std::uint64_t key_;
  };

  // Runs `item` (one step of a member's job; its pointers must stay valid
  // until the call returns) in a batch with the steps other members of its
  // shape hand in within the gather window, and returns the number of
  // job-steps that batch held (1: alone).
  int Step(const reference::SampleStep& item);
  Stats stats() const;

 private:
  struct Pending {
    reference::SampleStep item;
    bool done = false;
    int batch = 0;
  };
  // One latent shape's jobs.
  struct Group {
    int members = 0;
    std::vector<Pending*> waiting;  // Handed in, not yet taken, in arrival order.
    bool leading = false;           // A step is gathering or running a batch.
  };
  static std::uint64_t Key(const reference::LatentShape& s) {
    return (static_cast<std::uint64_t>(s.t) << 40) | (static_cast<std::uint64_t>(s.h) << 20) |
           static_cast<std::uint64_t>(s.w);
  }
  void Join(std::uint64_t key);
  void Leave(std::uint64_t key);

  Options o_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::uint64_t, Group> groups_;  // A shape's, while it has members or steps.
  Stats stats_;
};

}  // namespace sluice::internal

#endif  // SLUICE_RUNTIME_STEP_BATCHER_H_
