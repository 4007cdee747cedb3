#include "orchestrator/core/worker_instances.h"

#include <string>

namespace sluice::orchestrator {

Result<std::optional<WorkerId>> WorkerInstances::Admit(std::uint64_t instance,
                                                       std::uint64_t attempt) const {
  if (instance == 0) {
    return std::optional<WorkerId>();
  }
  auto it = latest_.find(instance);
  if (it == latest_.end()) {
    return std::optional<WorkerId>();
  }
  if (attempt <= it->second.first) {
    return FailedPreconditionError("registration attempt " + std::to_string(attempt) +
                                   " is older than this worker's attempt " +
                                   std::to_string(it->second.first) + " (delayed in the network)");
  }
  return std::optional<WorkerId>(it->second.second);
}

void WorkerInstances::Bind(std::uint64_t instance, std::uint64_t attempt, WorkerId id) {
  if (instance != 0) {
    latest_[instance] = {attempt, id};
  }
}

void WorkerInstances::Lost(std::uint64_t instance, WorkerId id) {
  if (auto it = latest_.find(instance); it != latest_.end() && it->second.second == id) {
    latest_.erase(it);
  }
}

}  // namespace sluice::orchestrator
