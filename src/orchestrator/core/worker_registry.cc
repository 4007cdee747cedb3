#include "orchestrator/core/worker_registry.h"

#include <utility>

#include "common/random.h"

namespace sluice::orchestrator {

WorkerId WorkerRegistry::NewId() const {
  WorkerId id = 0;
  while (id == 0 || workers_.count(id) != 0) {
    internal::RandomBytes(&id, sizeof(id));
    id &= (WorkerId{1} << 53) - 1;
  }
  return id;
}

void WorkerRegistry::Add(WorkerId id, std::string stage, int capacity, std::uint64_t instance,
                         TimePoint now) {
  RegisteredWorker& w = workers_[id];
  w.stage = std::move(stage);
  w.capacity = capacity;
  w.instance = instance;
  w.last_heard = now;
}

const RegisteredWorker* WorkerRegistry::Find(WorkerId id) const {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : &it->second;
}

bool WorkerRegistry::Heard(WorkerId id, TimePoint now) {
  auto it = workers_.find(id);
  if (it == workers_.end()) {
    return false;
  }
  it->second.last_heard = now;
  return true;
}

void WorkerRegistry::CountReport(WorkerId id) {
  if (auto it = workers_.find(id); it != workers_.end()) {
    ++it->second.reports;
  }
}

int WorkerRegistry::CountBadOutput(WorkerId id) {
  auto it = workers_.find(id);
  return it == workers_.end() ? 0 : ++it->second.bad_outputs;
}

std::vector<WorkerId> WorkerRegistry::Silent(TimePoint now) const {
  std::vector<WorkerId> out;
  for (const auto& [id, w] : workers_) {
    if (now - w.last_heard > timeout_) {
      out.push_back(id);
    }
  }
  return out;
}

}  // namespace sluice::orchestrator
