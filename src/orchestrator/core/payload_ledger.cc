#include "orchestrator/core/payload_ledger.h"

namespace sluice::orchestrator {

void PayloadLedger::Record(JobId job, const std::string& stage, std::vector<std::string> keys) {
  std::vector<std::string>& held = by_job_[job][stage];
  for (const std::string& k : held) {
    owner_.erase(k);
  }
  held = std::move(keys);
  for (const std::string& k : held) {
    owner_[k] = {job, stage};
  }
}

std::vector<std::string> PayloadLedger::Take(JobId job, const std::string& stage) {
  auto j = by_job_.find(job);
  if (j == by_job_.end()) {
    return {};
  }
  auto s = j->second.find(stage);
  if (s == j->second.end()) {
    return {};
  }
  std::vector<std::string> keys = std::move(s->second);
  for (const std::string& k : keys) {
    owner_.erase(k);
  }
  j->second.erase(s);
  if (j->second.empty()) {
    by_job_.erase(j);
  }
  return keys;
}

void PayloadLedger::Release(JobId job, const std::string& stage) {
  for (std::string& k : Take(job, stage)) {
    released_.push_back(std::move(k));
  }
}

void PayloadLedger::ReleaseJob(JobId job) {
  auto j = by_job_.find(job);
  if (j == by_job_.end()) {
    return;
  }
  for (auto& [stage, keys] : j->second) {
    for (std::string& k : keys) {
      owner_.erase(k);
      released_.push_back(std::move(k));
    }
  }
  by_job_.erase(j);
}

void PayloadLedger::ReleaseUnlessOwned(const std::string& key) {
  if (owner_.find(key) == owner_.end()) {
    released_.push_back(key);
  }
}

void PayloadLedger::ReleaseKeys(const std::vector<std::string>& keys) {
  for (const std::string& k : keys) {
    ReleaseUnlessOwned(k);
  }
}

void PayloadLedger::Drop(JobId job, const std::string& stage) {
  (void)Take(job, stage);
}

std::optional<std::pair<JobId, std::string>> PayloadLedger::Owner(const std::string& key) const {
  auto it = owner_.find(key);
  if (it == owner_.end()) {
    return std::nullopt;
  }
  return it->second;
}

}  // namespace sluice::orchestrator
