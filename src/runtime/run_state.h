// What a worker keeps of one run (an assignment being handled): shared by
// the worker's threads (stage_worker.cc) and the handler's StageContext
// (stage_context.cc), which reports through it.
#ifndef SLUICE_RUNTIME_RUN_STATE_H_
#define SLUICE_RUNTIME_RUN_STATE_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "proto/orchestrator/v1/orchestrator.pb.h"

namespace sluice::internal {

struct RunState {
  std::uint64_t job_id = 0;
  // The registration it runs under and that registration's secret: the
  // one that received it, or a later one of this worker that was assigned
  // the same job again (an orchestrator restarted on its journal). Written
  // and read under the worker's mu_ (Adopt, CountReport).
  std::uint64_t worker_id = 0;
  std::string session_secret;
  std::string job_name, stage, model, request_json, input;
  int resume_step = 0;
  bool interactive = false;  // The job's class is interactive.
  std::atomic<bool> stop{false}, checkpoint{false};
  std::atomic<bool> reported{false};  // Done/Failed sent (by the runner or by Drain).
  Mutex mu;
  int step SLUICE_GUARDED_BY(mu) = -1;
  int steps SLUICE_GUARDED_BY(mu) = 0;
  bool checkpointed SLUICE_GUARDED_BY(mu) = false;
  bool progress_dirty SLUICE_GUARDED_BY(mu) = false;
  bool first_output SLUICE_GUARDED_BY(mu) = false;
  bool first_sent SLUICE_GUARDED_BY(mu) = false;
  std::string preview SLUICE_GUARDED_BY(mu);  // Newest unsent preview (empty: none).
  // When the assignment arrived; the run's timings (StageContext::AddTiming
  // and the worker's own "start" and "run").
  std::chrono::steady_clock::time_point received = std::chrono::steady_clock::now();
  std::map<std::string, double, std::less<>> timings_ms SLUICE_GUARDED_BY(mu);
  // The run's counts (StageContext::AddCount).
  std::map<std::string, std::int64_t, std::less<>> counts SLUICE_GUARDED_BY(mu);
  // What the worker holds after the run (StageContext::SetHeld).
  std::optional<std::vector<std::string>> held SLUICE_GUARDED_BY(mu);
  int preview_step SLUICE_GUARDED_BY(mu) = 0;
  // Sends the next heartbeat now (the worker's; it outlives its runs):
  // a first output reaches the orchestrator at once, not a beat later.
  std::function<void()> beat_now;
  // Latest checkpointed step not yet reported (0: none).
  // Checkpointed steps not yet reported, oldest first (every one is
  // reported: a job keeping its checkpoints is resumable from each).
  std::vector<int> unsent_checkpoints SLUICE_GUARDED_BY(mu);
  // Latest checkpointed step a heartbeat the orchestrator answered carried
  // (0: none).
  int acked_checkpoint SLUICE_GUARDED_BY(mu) = 0;
  std::uint64_t steps_reported SLUICE_GUARDED_BY(mu) = 0;  // Progress calls that moved the step.
  // When the step last moved (the run's start before the first), and how
  // long each step took, in seconds (the first 4096).
  std::chrono::steady_clock::time_point last_step_at SLUICE_GUARDED_BY(mu);
  std::vector<double> step_seconds SLUICE_GUARDED_BY(mu);

  // Moves unsent progress into `hb`: each checkpointed step a later step
  // superseded, oldest first (a resumed job starts from the latest), then
  // the latest step. Returns the latest checkpointed step it carries (0:
  // none).
  int AppendProgress(::sluice::orchestrator::v1::HeartbeatRequest& hb) SLUICE_REQUIRES(mu) {
    int carried = 0;
    if (progress_dirty) {
      carried = checkpointed ? step : unsent_checkpoints.empty() ? 0 : unsent_checkpoints.back();
      for (int c_step : unsent_checkpoints) {
        if (checkpointed && c_step == step) {
          continue;  // The latest step below says it.
        }
        auto* c = hb.add_progress();
        c->set_job_id(job_id);
        c->set_step(static_cast<std::uint32_t>(c_step));
        c->set_steps(static_cast<std::uint32_t>(std::max(0, steps)));
        c->set_checkpointed(true);
      }
      auto* p = hb.add_progress();
      p->set_job_id(job_id);
      p->set_step(static_cast<std::uint32_t>(std::max(0, step)));
      p->set_steps(static_cast<std::uint32_t>(std::max(0, steps)));
      p->set_checkpointed(checkpointed);
      if (!preview.empty()) {
        p->set_preview(std::move(preview));
        p->set_preview_step(static_cast<std::uint32_t>(std::max(0, preview_step)));
        preview.clear();
      }
      progress_dirty = false;
      unsent_checkpoints.clear();
    }
    if (first_output && !first_sent) {
      hb.add_first_output(job_id);
      first_sent = true;
    }
    return carried;
  }

  // The orchestrator answered a heartbeat carrying checkpointed step
  // `step` (0: none) of this run.
  void Acked(int step) {
    MutexLock lock(mu);
    acked_checkpoint = std::max(acked_checkpoint, step);
  }
};

}  // namespace sluice::internal

#endif  // SLUICE_RUNTIME_RUN_STATE_H_
