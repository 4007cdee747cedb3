// Step-level continuous batching for a stage handler (the C++ side of
// Python's sluice.StepBatcher). A denoise worker with capacity K runs up to
// K handler calls at once, each on its own thread with its own
// StageContext: a job's progress, checkpoints, previews, cancellation and
// lease stay its own. Each handler hands every step of its sampler loop to
// one StepBatcher the worker shares; the steps of one key (jobs that can
// share a forward: the same latent shape) that arrive within the gather
// window run as one call of `run`:
//
//   sluice::StepBatcher<MyStep> batcher(RunMany, {.max_batch = 4});
//   // In the handler:
//   sluice::StepBatcher<MyStep>::Member member(&batcher, ShapeKey(job));
//   for (int i = start; i < steps; ++i) {
//     MyStep step{...};                        // Its inputs, where its output goes.
//     Result<int> n = batcher.Step(ShapeKey(job), step);  // n: steps in that batch.
//     ...
//   }
//
// While a job is a member of its key, a batch of that key waits (up to the
// gather window) for the job's next step before running without it, so
// jobs join and leave the running batch at step boundaries: a new job
// waits at most one step. `run` is called on the thread of the batch's
// first step, without the batcher's lock, with the items of one batch
// (1..max_batch, in arrival order); it writes each item's result where the
// item says. What it returns is every member's Step result.
//
// Thread safety: every method may be called from any thread.
#ifndef SLUICE_RUNTIME_STEP_BATCHER_H_
#define SLUICE_RUNTIME_STEP_BATCHER_H_

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

#include "sluice/status.h"

namespace sluice {

template <class Item>
class StepBatcher {
 public:
  // Runs one batch of steps; must not call back into the batcher.
  using Run = std::function<Status(std::span<Item* const> items)>;
  struct Options {
    int max_batch = 8;  // Steps run as one batch, 1..64 (clamped).
    // How long a batch's first step waits for the other members' (those
    // between steps: saving a checkpoint, making a preview).
    std::chrono::microseconds gather{5000};
  };
  struct Stats {
    std::uint64_t batches = 0, steps = 0;  // Batches run, steps in them.
    int largest = 0;                       // The most steps in one batch.
  };

  StepBatcher(Run run, Options o) : run_(std::move(run)), o_(o) {
    o_.max_batch = std::clamp(o_.max_batch, 1, 64);
  }

  // A job's membership of `key`'s batches: from before its first step to
  // after its last. The batcher must outlive it.
  class Member {
   public:
    Member(StepBatcher* b, std::uint64_t key) : b_(b), key_(key) { b_->Join(key_); }
    ~Member() { b_->Leave(key_); }
    Member(const Member&) = delete;
    Member& operator=(const Member&) = delete;

   private:
    StepBatcher* b_;
    std::uint64_t key_;
  };

  // Runs `item` (it must stay valid until the call returns) in a batch with
  // the steps other members of `key` hand in within the gather window, and
  // returns the number of steps that batch held (1: alone), or what `run`
  // returned for it. A step outside a membership runs too.
  Result<int> Step(std::uint64_t key, Item& item);

  Stats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

 private:
  struct Pending {
    Item* item = nullptr;
    bool done = false;
    int batch = 0;
    Status status;
  };
  struct Group {
    int members = 0;
    std::vector<Pending*> waiting;  // Handed in, not yet taken, in arrival order.
    bool leading = false;           // A step is gathering or running a batch.
  };

  void Join(std::uint64_t key) {
    std::lock_guard<std::mutex> lock(mu_);
    ++groups_[key].members;
  }
  void Leave(std::uint64_t key) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      Group& g = groups_[key];
      if (--g.members == 0 && g.waiting.empty() && !g.leading) {
        groups_.erase(key);
      }
    }
    cv_.notify_all();  // A gathering step may now have every member's.
  }

  const Run run_;
  Options o_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::uint64_t, Group> groups_;  // A key's, while it has members or steps.
  Stats stats_;
};

template <class Item>
Result<int> StepBatcher<Item>::Step(std::uint64_t key, Item& item) {
  Pending p{&item, false, 0, Status::Ok()};
  std::unique_lock<std::mutex> lock(mu_);
  Group& g = groups_[key];  // Stable: std::map nodes stay put.
  g.waiting.push_back(&p);
  cv_.notify_all();
  while (!p.done) {
    if (g.leading) {
      cv_.wait(lock, [&] { return p.done || !g.leading; });
      continue;
    }
    // This step leads its key's batch: it waits for every member's step
    // (or the window's end, or a full batch), then runs the batch.
    g.leading = true;
    const auto until = std::chrono::steady_clock::now() + o_.gather;
    cv_.wait_until(lock, until, [&] {
      const int want = std::min(std::max(g.members, 1), o_.max_batch);
      return static_cast<int>(g.waiting.size()) >= want;
    });
    const std::size_t n = std::min<std::size_t>(g.waiting.size(), o_.max_batch);
    std::vector<Pending*> taken(g.waiting.begin(), g.waiting.begin() + n);
    g.waiting.erase(g.waiting.begin(), g.waiting.begin() + n);
    lock.unlock();
    std::vector<Item*> items;
    for (Pending* t : taken) {
      items.push_back(t->item);
    }
    const Status ran = run_(items);
    lock.lock();
    for (Pending* t : taken) {
      t->done = true;
      t->batch = static_cast<int>(n);
      t->status = ran;
    }
    ++stats_.batches;
    stats_.steps += n;
    stats_.largest = std::max(stats_.largest, static_cast<int>(n));
    g.leading = false;
    if (g.members == 0 && g.waiting.empty()) {
      groups_.erase(key);  // A key stepped outside any membership.
    }
    cv_.notify_all();
  }
  if (!p.status.ok()) {
    return p.status;
  }
  return p.batch;
}

}  // namespace sluice

#endif  // SLUICE_RUNTIME_STEP_BATCHER_H_
