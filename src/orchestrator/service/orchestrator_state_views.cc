// Read-side queries of jobs: views, previews, listings, names, waiting for
// an outcome and the event feed. Each takes the state's lock; none changes
// a job.
#include <algorithm>
#include <utility>

#include "common/mutex.h"
#include "orchestrator/service/orchestrator_state.h"

namespace sluice::orchestrator {
namespace {

// `v` with its progress through `pipeline` (the stages it runs), weighed by
// the kinds its model declares for them.
JobView WithProgress(JobView v, const Scheduler& scheduler,
                     const std::vector<std::string>& pipeline) {
  if (v.status == JobStatus::kSucceeded) {
    v.progress = 1;
    return v;
  }
  std::vector<StageDecl> run;
  if (const ModelSpec* m = scheduler.FindModel(v.model)) {
    for (const StageDecl& d : m->stages) {
      if (std::find(pipeline.begin(), pipeline.end(), d.name) != pipeline.end()) {
        run.push_back(d);
      }
    }
  }
  v.progress = PipelineProgress(run, v.stage, v.step, v.steps);
  return v;
}

}  // namespace

std::optional<JobView> OrchestratorState::Get(JobId id) {
  MutexLock lock(mu_);
  auto j = jobs_.find(id);
  if (j == jobs_.end()) {
    return std::nullopt;
  }
  return WithProgress(j->second.view, scheduler_, j->second.request.pipeline);
}

std::optional<OrchestratorState::PreviewImage> OrchestratorState::Preview(JobId id) {
  MutexLock lock(mu_);
  auto j = jobs_.find(id);
  if (j == jobs_.end() || j->second.preview.png.empty()) {
    return std::nullopt;
  }
  return j->second.preview;
}

std::vector<JobView> OrchestratorState::List(std::string_view kind, std::string_view tenant,
                                             bool any_tenant, JobId after, std::size_t limit,
                                             bool ascending) {
  MutexLock lock(mu_);
  std::vector<JobView> out;
  auto add = [&](const JobRecord& j) SLUICE_REQUIRES(mu_) {
    if ((!kind.empty() && j.view.kind != kind) || (!any_tenant && j.view.tenant != tenant)) {
      return true;
    }
    JobView v = WithProgress(j.view, scheduler_, j.request.pipeline);
    v.result.clear();
    v.events.clear();
    out.push_back(std::move(v));
    return out.size() < limit;
  };
  if (ascending) {
    for (auto it = jobs_.upper_bound(after); it != jobs_.end() && add(it->second); ++it) {
    }
  } else {
    auto it = after == 0 ? jobs_.end() : jobs_.lower_bound(after);
    while (it != jobs_.begin() && add((--it)->second)) {
    }
  }
  return out;
}

Status OrchestratorState::Forget(JobId id) {
  const JournalFlush flush(this);  // After the lock is released.
  const TimePoint now = Now();
  MutexLock lock(mu_);
  auto j = jobs_.find(id);
  if (j == jobs_.end()) {
    return NotFoundError("no job " + std::to_string(id));
  }
  if (!j->second.view.finished()) {
    SLUICE_RETURN_IF_ERROR(CancelLocked(j->second, now));
  }
  EraseLocked(id);
  finished_order_.erase(std::remove(finished_order_.begin(), finished_order_.end(), id),
                        finished_order_.end());
  return Status::Ok();
}

void OrchestratorState::EraseLocked(JobId id) {
  if (auto j = jobs_.find(id); j != jobs_.end()) {
    if (j->second.view.result_stored) {
      results_->Remove(id);
    }
    names_.erase(j->second.view.name);
    checkpoints_.Forget(id);
    jobs_.erase(j);
  }
}

std::optional<JobId> OrchestratorState::Find(std::string_view name) {
  MutexLock lock(mu_);
  auto n = names_.find(std::string(name));
  return n == names_.end() ? std::nullopt : std::optional<JobId>(n->second);
}

std::optional<JobView> OrchestratorState::WaitFinished(JobId id,
                                                       std::chrono::milliseconds timeout) {
  MutexLock lock(mu_);
  cv_.WaitFor(lock, timeout, [&]() SLUICE_REQUIRES(mu_) {
    auto j = jobs_.find(id);
    return j == jobs_.end() || j->second.view.finished();
  });
  auto j = jobs_.find(id);
  if (j == jobs_.end()) {
    return std::nullopt;
  }
  return WithProgress(j->second.view, scheduler_, j->second.request.pipeline);
}

std::pair<std::vector<JobEvent>, bool> OrchestratorState::EventsFrom(
    JobId id, std::size_t from, std::chrono::milliseconds timeout) {
  MutexLock lock(mu_);
  cv_.WaitFor(lock, timeout, [&]() SLUICE_REQUIRES(mu_) {
    auto j = jobs_.find(id);
    return j == jobs_.end() || j->second.view.events.size() > from || j->second.view.finished();
  });
  auto j = jobs_.find(id);
  if (j == jobs_.end()) {
    return {{}, true};
  }
  const auto& ev = j->second.view.events;
  std::vector<JobEvent> out(ev.begin() + static_cast<std::ptrdiff_t>(std::min(from, ev.size())),
                            ev.end());
  return {std::move(out), j->second.view.finished()};
}

}  // namespace sluice::orchestrator
