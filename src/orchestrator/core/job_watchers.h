// Who watches which job: callbacks woken on each of a job's events (the
// HTTP face's event streams and long polls). A plain table, not thread
// safe: its owner (the service's state) calls it under its own lock.
#ifndef SLUICE_ORCHESTRATOR_CORE_JOB_WATCHERS_H_
#define SLUICE_ORCHESTRATOR_CORE_JOB_WATCHERS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "orchestrator/core/policy.h"

namespace sluice::orchestrator {

class JobWatchers {
 public:
  // Registers `wake` for `job`'s events. Returns the watch's token (never 0).
  std::uint64_t Add(JobId job, std::function<void()> wake);
  // Ends the watch `token`: `wake` is not called by Wake after this.
  // Returns its `wake` (empty for an unknown or ended token, 0 included),
  // so the caller can destroy it outside its lock.
  std::function<void()> Remove(std::uint64_t token);
  // Calls every `wake` of `job`, in the order they were added.
  void Wake(JobId job) const;
  // Watches in force.
  std::size_t size() const { return jobs_.size(); }

 private:
  std::map<JobId, std::vector<std::pair<std::uint64_t, std::function<void()>>>> by_job_;
  std::map<std::uint64_t, JobId> jobs_;  // token -> job.
  std::uint64_t next_ = 1;
};

}  // namespace sluice::orchestrator

#endif  // SLUICE_ORCHESTRATOR_CORE_JOB_WATCHERS_H_
