// Which registration of each worker process is current. A worker process
// names itself by an instance id it keeps across reconnects and numbers
// its registration attempts; a registration older than the latest one
// admitted was delayed in the network and is refused, and a newer one
// replaces the registration before it. A plain table, not thread safe:
// its owner (the service's state) calls it under its own lock.
#ifndef SLUICE_ORCHESTRATOR_CORE_WORKER_INSTANCES_H_
#define SLUICE_ORCHESTRATOR_CORE_WORKER_INSTANCES_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <utility>

#include "sluice/status.h"

#include "orchestrator/core/policy.h"

namespace sluice::orchestrator {

class WorkerInstances {
 public:
  // Whether registration `attempt` of `instance` may go ahead: the worker
  // whose registration it replaces (nullopt: none, as for instance 0, a
  // worker that names none). kFailedPrecondition when `attempt` is not
  // newer than the instance's latest bound attempt. Changes nothing.
  Result<std::optional<WorkerId>> Admit(std::uint64_t instance, std::uint64_t attempt) const;
  // Records worker `id` as `instance`'s registration `attempt` (instance
  // 0: nothing).
  void Bind(std::uint64_t instance, std::uint64_t attempt, WorkerId id);
  // Worker `id` of `instance` is gone: the instance is forgotten when `id`
  // is its current registration (a replaced one's loss changes nothing).
  void Lost(std::uint64_t instance, WorkerId id);
  // Instances with a current registration.
  std::size_t size() const { return latest_.size(); }

 private:
  std::map<std::uint64_t, std::pair<std::uint64_t, WorkerId>> latest_;  // -> (attempt, worker).
};

}  // namespace sluice::orchestrator

#endif  // SLUICE_ORCHESTRATOR_CORE_WORKER_INSTANCES_H_
