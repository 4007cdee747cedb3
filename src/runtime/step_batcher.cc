#include "runtime/step_batcher.h"

#include <algorithm>

namespace sluice::internal {

void StepBatcher::Join(std::uint64_t key) {
  std::lock_guard<std::mutex> lock(mu_);
  ++groups_[key].members;
}

void StepBatcher::Leave(std::uint64_t key) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    Group& g = groups_[key];
    if (--g.members == 0 && g.waiting.empty() && !g.leading) {
      groups_.erase(key);
    }
  }
  cv_.notify_all();  // A gathering step may now have every member's.
}

int StepBatcher::Step(const reference::SampleStep& item) {
  Pending p{item};
  const std::uint64_t key = Key(item.r->latent());
  std::unique_lock<std::mutex> lock(mu_);
  Group& g = groups_[key];  // Stable: a member's group stays while it is one.
  g.waiting.push_back(&p);
  cv_.notify_all();
  while (!p.done) {
    if (g.leading) {
      cv_.wait(lock, [&] { return p.done || !g.leading; });
      continue;
    }
    // This step leads its shape's batch: it waits for every member's step
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
    std::vector<reference::SampleStep> batch;
    for (Pending* t : taken) {
      batch.push_back(t->item);
    }
    // A lone step runs unbatched: DenoiseStep's bits.
    reference::DenoiseSteps(batch, /*batched=*/n > 1);
    lock.lock();
    for (Pending* t : taken) {
      t->done = true;
      t->batch = static_cast<int>(n);
    }
    ++stats_.batches;
    stats_.steps += n;
    stats_.largest = std::max(stats_.largest, static_cast<int>(n));
    g.leading = false;
    cv_.notify_all();
  }
  return p.batch;
}

StepBatcher::Stats StepBatcher::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace sluice::internal
