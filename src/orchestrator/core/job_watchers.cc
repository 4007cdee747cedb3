#include "orchestrator/core/job_watchers.h"

namespace sluice::orchestrator {

std::uint64_t JobWatchers::Add(JobId job, std::function<void()> wake) {
  const std::uint64_t token = next_++;
  by_job_[job].emplace_back(token, std::move(wake));
  jobs_[token] = job;
  return token;
}

std::function<void()> JobWatchers::Remove(std::uint64_t token) {
  std::function<void()> out;
  auto t = jobs_.find(token);
  if (t == jobs_.end()) {
    return out;
  }
  auto w = by_job_.find(t->second);
  jobs_.erase(t);
  if (w == by_job_.end()) {
    return out;
  }
  auto& list = w->second;
  for (auto it = list.begin(); it != list.end(); ++it) {
    if (it->first == token) {
      out = std::move(it->second);
      list.erase(it);
      break;
    }
  }
  if (list.empty()) {
    by_job_.erase(w);
  }
  return out;
}

void JobWatchers::Wake(JobId job) const {
  if (auto w = by_job_.find(job); w != by_job_.end()) {
    for (const auto& [token, wake] : w->second) {
      wake();
    }
  }
}

}  // namespace sluice::orchestrator
