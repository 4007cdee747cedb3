// Kept checkpoints and jobs resumed from them (edit and resume).
#include <nlohmann/json.hpp>

#include "orchestrator/service/orchestrator_state.h"

namespace sluice::orchestrator {

using nlohmann::json;

Status OrchestratorState::ResolveCheckpointsLocked(JobRequest& r, TimePoint now) {
  if (!r.keep_checkpoints && !r.resume_from.has_value()) {
    return Status::Ok();
  }
  json req = json::parse(r.request_json, nullptr, /*allow_exceptions=*/false);
  if (!req.is_object()) {
    return InvalidArgumentError("request: not a JSON object");
  }
  if (r.keep_checkpoints) {
    req["keep_checkpoints"] = true;
    req["keep_checkpoints_s"] = options_.checkpoint_retention.count();
  }
  if (r.resume_from.has_value()) {
    const ResumeFrom& from = *r.resume_from;
    auto n = names_.find(from.job);
    auto j = n == names_.end() ? jobs_.end() : jobs_.find(n->second);
    if (j == jobs_.end() || j->second.view.tenant != r.tenant) {
      return NotFoundError("resume_from: no job " + from.job);
    }
    const JobRecord& earlier = j->second;
    const std::string& model = r.model.empty() ? options_.default_model : r.model;
    if (earlier.request.model != model) {
      return InvalidArgumentError("resume_from: job " + from.job + " ran model " +
                                  earlier.request.model + ", not " + model);
    }
    SLUICE_RETURN_IF_ERROR(checkpoints_.Check(earlier.view.id, from.job, from.step, now));
    const json old = json::parse(earlier.request.request_json, nullptr, false);
    for (const char* field : {"size", "seed", "steps", "frames"}) {
      const json a = old.is_object() && old.contains(field) ? old[field] : json();
      const json b = req.contains(field) ? req[field] : json();
      if (a != b) {
        return InvalidArgumentError(std::string("resume_from: ") + field + " must be job " +
                                    from.job + "'s (" + (a.is_null() ? "unset" : a.dump()) + ")");
      }
    }
    req["resume_checkpoint"] = {{"request", old}, {"step", from.step}};
  }
  r.request_json = req.dump();
  return Status::Ok();
}

}  // namespace sluice::orchestrator
