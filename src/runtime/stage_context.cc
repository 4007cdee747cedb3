// StageContext: how a handler reports on its run (progress, previews,
// timings, counts, what the worker holds), through the run's RunState.
#include <algorithm>

#include "sluice/runtime/stage_worker.h"

#include "orchestrator/core/model.h"
#include "runtime/run_state.h"

namespace sluice {

std::uint64_t StageContext::job_id() const {
  return s_->job_id;
}
const std::string& StageContext::stage() const {
  return s_->stage;
}
const std::string& StageContext::model() const {
  return s_->model;
}
const std::string& StageContext::job_name() const {
  return s_->job_name;
}
const std::string& StageContext::request_json() const {
  return s_->request_json;
}
bool StageContext::interactive() const {
  return s_->interactive;
}
const std::string& StageContext::input() const {
  return s_->input;
}
int StageContext::resume_step() const {
  return s_->resume_step;
}
void StageContext::Progress(int step, int steps, bool checkpointed) {
  MutexLock lock(s_->mu);
  if (step != s_->step) {
    ++s_->steps_reported;
    const auto now = std::chrono::steady_clock::now();
    if (s_->step_seconds.size() < 4096) {
      s_->step_seconds.push_back(std::chrono::duration<double>(now - s_->last_step_at).count());
    }
    s_->last_step_at = now;
  }
  s_->step = step;
  s_->steps = steps;
  s_->checkpointed = checkpointed;
  if (checkpointed && s_->unsent_checkpoints.size() < 4096) {
    s_->unsent_checkpoints.push_back(step);
  }
  s_->progress_dirty = true;
}
void StageContext::Preview(int step, std::string png) {
  if (png.empty() || png.size() > orchestrator::kMaxPreviewBytes) {
    return;
  }
  MutexLock lock(s_->mu);
  s_->preview = std::move(png);
  s_->preview_step = step;
  s_->progress_dirty = true;
}
void StageContext::KeepAlive() {
  MutexLock lock(s_->mu);
  s_->progress_dirty = true;  // The next heartbeat repeats the latest step.
}
int StageContext::ReportedCheckpoint() const {
  MutexLock lock(s_->mu);
  return s_->acked_checkpoint;
}
void StageContext::FirstOutput() {
  {
    MutexLock lock(s_->mu);
    if (s_->first_output) {
      return;
    }
    s_->first_output = true;
  }
  if (s_->beat_now) {
    s_->beat_now();
  }
}
bool IsTimingPhase(std::string_view phase) {
  return orchestrator::IsTimingName(phase) && phase != "start" && phase != "run";
}

void StageContext::AddTiming(std::string_view phase, std::chrono::duration<double> d) {
  if (!IsTimingPhase(phase)) {
    return;
  }
  MutexLock lock(s_->mu);
  auto it = s_->timings_ms.find(phase);
  if (it == s_->timings_ms.end()) {
    if (s_->timings_ms.size() >= orchestrator::kMaxTimings - 2) {  // Room for start and run.
      return;
    }
    it = s_->timings_ms.emplace(std::string(phase), 0.0).first;
  }
  it->second += std::chrono::duration<double, std::milli>(d).count();
}

bool IsCountName(std::string_view name) {
  return orchestrator::IsTimingName(name);
}

Status CheckHeldLabels(const std::vector<std::string>& labels) {
  if (labels.size() > orchestrator::kMaxHeldLabels) {
    return InvalidArgumentError("held labels: " + std::to_string(labels.size()) +
                                " of them, at most " +
                                std::to_string(orchestrator::kMaxHeldLabels));
  }
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i].empty() || labels[i].size() > orchestrator::kMaxHeldLabelBytes) {
      return InvalidArgumentError("held label " + std::to_string(i) + ": 1.." +
                                  std::to_string(orchestrator::kMaxHeldLabelBytes) +
                                  " bytes, not " + std::to_string(labels[i].size()));
    }
  }
  return Status::Ok();
}

void StageContext::AddCount(std::string_view name, std::int64_t n) {
  if (!IsCountName(name) || n < 0) {
    return;
  }
  MutexLock lock(s_->mu);
  auto it = s_->counts.find(name);
  if (it == s_->counts.end()) {
    if (s_->counts.size() >= orchestrator::kMaxCounts) {
      return;
    }
    it = s_->counts.emplace(std::string(name), 0).first;
  }
  it->second = std::min(it->second + n, orchestrator::kMaxCount);
}

void StageContext::SetHeld(std::vector<std::string> labels) {
  std::erase_if(labels, [](const std::string& l) {
    return l.empty() || l.size() > orchestrator::kMaxHeldLabelBytes;
  });
  if (labels.size() > orchestrator::kMaxHeldLabels) {
    labels.resize(orchestrator::kMaxHeldLabels);
  }
  MutexLock lock(s_->mu);
  s_->held = std::move(labels);
}

bool StageContext::ShouldStop() const {
  return s_->stop.load();
}
bool StageContext::ShouldCheckpoint() const {
  return s_->checkpoint.load();
}

}  // namespace sluice
