// The workers registered with the orchestrator as the core sees them: each
// one's stage, capacity and process instance, when it was last heard
// from, and its counts of reports and refused outputs; who has gone silent
// for longer than the worker timeout. How assignments reach a worker (its
// stream) is the service's. A plain table fed the time, not thread safe:
// its owner (the service's state) calls it under its own lock.
#ifndef SLUICE_ORCHESTRATOR_CORE_WORKER_REGISTRY_H_
#define SLUICE_ORCHESTRATOR_CORE_WORKER_REGISTRY_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "orchestrator/core/policy.h"

namespace sluice::orchestrator {

struct RegisteredWorker {
  std::string stage;
  int capacity = 1;
  std::uint64_t instance = 0;  // Its process's instance id (0: none).
  TimePoint last_heard;        // Registration or latest heartbeat.
  std::uint64_t reports = 0;   // Done and Failed reports received from it.
  int bad_outputs = 0;         // Final outputs refused by the output check.
};

class WorkerRegistry {
 public:
  // `timeout`: a worker not heard from for longer is silent.
  explicit WorkerRegistry(std::chrono::milliseconds timeout) : timeout_(timeout) {}

  // A random id for a new worker: non-zero, below 2^53 (JSON readers keep
  // it exact), not in use, and saying nothing of other workers' ids.
  WorkerId NewId() const;
  // Adds worker `id` (an id from NewId), heard from at `now`.
  void Add(WorkerId id, std::string stage, int capacity, std::uint64_t instance, TimePoint now);
  // The worker, or null; valid until it is removed.
  const RegisteredWorker* Find(WorkerId id) const;
  // Worker `id` was heard from at `now`. Returns false for an unknown one.
  bool Heard(WorkerId id, TimePoint now);
  // Counts a Done or Failed report of worker `id` (unknown: nothing).
  void CountReport(WorkerId id);
  // Counts a refused output of worker `id`. Returns its count of them (0
  // for an unknown worker).
  int CountBadOutput(WorkerId id);
  // Workers not heard from for longer than the timeout at `now`, by id.
  std::vector<WorkerId> Silent(TimePoint now) const;
  // Forgets worker `id` (unknown: nothing).
  void Remove(WorkerId id) { workers_.erase(id); }
  const std::map<WorkerId, RegisteredWorker>& all() const { return workers_; }
  std::size_t size() const { return workers_.size(); }

 private:
  const std::chrono::milliseconds timeout_;
  std::map<WorkerId, RegisteredWorker> workers_;
};

}  // namespace sluice::orchestrator

#endif  // SLUICE_ORCHESTRATOR_CORE_WORKER_REGISTRY_H_
