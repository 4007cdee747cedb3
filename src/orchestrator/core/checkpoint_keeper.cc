#include "orchestrator/core/checkpoint_keeper.h"

#include <string>

namespace sluice::orchestrator {

bool CheckpointKeeper::Keep(JobId job, int step, TimePoint at) {
  return kept_[job].try_emplace(step, at).second;
}

Status CheckpointKeeper::Check(JobId job, std::string_view name, int step, TimePoint now) const {
  const std::string job_name(name);
  auto j = kept_.find(job);
  if (j == kept_.end() || j->second.empty()) {
    return InvalidArgumentError("resume_from: job " + job_name +
                                " kept no checkpoints (submit it with keep_checkpoints)");
  }
  auto s = j->second.find(step);
  if (s == j->second.end()) {
    std::string kept;
    for (const auto& [k, at] : j->second) {
      kept += (kept.empty() ? "" : ", ") + std::to_string(k);
    }
    return InvalidArgumentError("resume_from.step: step " + std::to_string(step) + " of job " +
                                job_name + " was not kept (kept: " + kept + ")");
  }
  if (now - s->second > retention_) {
    return NotFoundError("resume_from: the checkpoint of step " + std::to_string(step) +
                         " of job " + job_name + " has expired");
  }
  return Status::Ok();
}

}  // namespace sluice::orchestrator
