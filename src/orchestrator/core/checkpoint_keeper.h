// The checkpoints jobs keep (submitted with keep_checkpoints) and whether
// an edit may resume from one: per job, each kept step and when it was
// reported, good for a retention period. A plain table fed the time, not
// thread safe: its owner (the service's state) calls it under its own lock.
#ifndef SLUICE_ORCHESTRATOR_CORE_CHECKPOINT_KEEPER_H_
#define SLUICE_ORCHESTRATOR_CORE_CHECKPOINT_KEEPER_H_

#include <chrono>
#include <cstddef>
#include <map>
#include <string_view>

#include "sluice/status.h"

#include "orchestrator/core/policy.h"

namespace sluice::orchestrator {

class CheckpointKeeper {
 public:
  // `retention`: how long after its report a kept step may be resumed from.
  explicit CheckpointKeeper(std::chrono::seconds retention) : retention_(retention) {}

  // Records step `step` of `job` as kept, reported at `at`. Returns false
  // when that step was kept already (its first report's time stays), so
  // the caller journals each step once.
  bool Keep(JobId job, int step, TimePoint at);
  // Ok when step `step` of `job` is kept and, at `now`, within the
  // retention. Errors name the job as `name` (the name its user knows):
  // kInvalidArgument when the job kept no step ("resume_from: ... kept no
  // checkpoints") or not this one ("resume_from.step: ...", listing the
  // kept steps); kNotFound when the step's retention has passed.
  Status Check(JobId job, std::string_view name, int step, TimePoint now) const;
  // Drops every step of `job` (the job is forgotten).
  void Forget(JobId job) { kept_.erase(job); }
  // Jobs with at least one kept step.
  std::size_t jobs() const { return kept_.size(); }
  std::chrono::seconds retention() const { return retention_; }

 private:
  const std::chrono::seconds retention_;
  std::map<JobId, std::map<int, TimePoint>> kept_;  // job -> step -> reported.
};

}  // namespace sluice::orchestrator

#endif  // SLUICE_ORCHESTRATOR_CORE_CHECKPOINT_KEEPER_H_
