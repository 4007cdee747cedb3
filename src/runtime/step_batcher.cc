#include "runtime/step_batcher.h"

#include <algorithm>

namespace sluice::internal {

void StepBatcher::Join() {
  std::lock_guard<std::mutex> lock(mu_);
  ++members_;
}

void StepBatcher::Leave() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    --members_;
  }
  cv_.notify_all();  // A gathering step may now have every member's.
}

void StepBatcher::Run(std::vector<Pending*>& taken) {
  // Jobs of one latent shape go together; a lone step runs unbatched
  // (DenoiseStep's bits).
  std::vector<bool> ran(taken.size(), false);
  std::vector<reference::SampleStep> group;
  for (std::size_t i = 0; i < taken.size(); ++i) {
    if (ran[i]) {
      continue;
    }
    const reference::LatentShape s = taken[i]->item.r->latent();
    group.clear();
    std::vector<std::size_t> members;
    for (std::size_t j = i; j < taken.size(); ++j) {
      const reference::LatentShape t = taken[j]->item.r->latent();
      if (!ran[j] && t.t == s.t && t.h == s.h && t.w == s.w) {
        ran[j] = true;
        group.push_back(taken[j]->item);
        members.push_back(j);
      }
    }
    reference::DenoiseSteps(group, /*batched=*/group.size() > 1);
    for (std::size_t j : members) {
      taken[j]->batch = static_cast<int>(group.size());
    }
  }
}

int StepBatcher::Step(const reference::SampleStep& item) {
  Pending p{item};
  std::unique_lock<std::mutex> lock(mu_);
  waiting_.push_back(&p);
  cv_.notify_all();
  while (!p.done) {
    if (leading_) {
      cv_.wait(lock, [&] { return p.done || !leading_; });
      continue;
    }
    // This step leads: it waits for every member's step (or the window's
    // end, or a full batch), then runs the batch.
    leading_ = true;
    const auto until = std::chrono::steady_clock::now() + o_.gather;
    cv_.wait_until(lock, until, [&] {
      const int want = std::min(std::max(members_, 1), o_.max_batch);
      return static_cast<int>(waiting_.size()) >= want;
    });
    const std::size_t n = std::min<std::size_t>(waiting_.size(), o_.max_batch);
    std::vector<Pending*> taken(waiting_.begin(), waiting_.begin() + n);
    waiting_.erase(waiting_.begin(), waiting_.begin() + n);
    lock.unlock();
    Run(taken);
    lock.lock();
    for (Pending* t : taken) {
      t->done = true;
    }
    ++stats_.batches;
    stats_.steps += n;
    stats_.largest = std::max(stats_.largest, static_cast<int>(n));
    leading_ = false;
    cv_.notify_all();
  }
  return p.batch;
}

StepBatcher::Stats StepBatcher::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace sluice::internal
