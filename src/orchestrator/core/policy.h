// Scheduling policy: the pluggable decisions of the scheduler core. Within
// one priority class a stage's queue is kept in deadline-then-arrival order;
// the policy decides which class head runs next (priority, aging) and which
// free worker takes it (affinity, load). Policies hold no state the
// scheduler depends on and are called on the scheduler's thread.
#ifndef SLUICE_ORCHESTRATOR_CORE_POLICY_H_
#define SLUICE_ORCHESTRATOR_CORE_POLICY_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::orchestrator {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;
using JobId = std::uint64_t;
using WorkerId = std::uint64_t;

enum class PriorityClass : std::uint8_t { kInteractive = 0, kStandard = 1, kBatch = 2 };
inline constexpr int kClassCount = 3;
// "interactive", "standard", "batch": how the API, metrics and tools name them.
inline constexpr const char* kClassNames[kClassCount] = {"interactive", "standard", "batch"};
inline const char* PriorityName(PriorityClass c) {
  return kClassNames[static_cast<int>(c)];
}
// The class named `name` (one of kClassNames); nullopt for any other.
inline std::optional<PriorityClass> ParsePriority(std::string_view name) {
  for (int c = 0; c < kClassCount; ++c) {
    if (name == kClassNames[c]) {
      return static_cast<PriorityClass>(c);
    }
  }
  return std::nullopt;
}

// A queued item as the policy sees it.
struct QueuedView {
  JobId job = 0;
  PriorityClass priority = PriorityClass::kStandard;
  std::optional<TimePoint> deadline;
  TimePoint queued_at;
  std::uint64_t seq = 0;  // Lower: earlier in line (head re-queues are lowest).
  std::string_view affinity;
};

// A worker with at least one free slot.
struct WorkerView {
  WorkerId id = 0;
  int free = 0;
  int capacity = 0;
  const std::vector<std::string>* labels = nullptr;
};

class SchedulingPolicy {
 public:
  virtual ~SchedulingPolicy() = default;
  // True if `a` should be dispatched before `b` (two class heads of a stage).
  virtual bool RunsBefore(const QueuedView& a, const QueuedView& b, TimePoint now) const = 0;
  // Picks the worker for `job`: `with_affinity` is the freest worker carrying
  // the job's affinity label (null if none is free), `freest` the freest of
  // the stage. Must return one of the two.
  virtual WorkerId ChooseWorker(const QueuedView& job, const WorkerView* with_affinity,
                                const WorkerView& freest) const = 0;
};

// Priority class, then deadline, then arrival; a queued item is promoted one
// class per `aging_step` waited. Prefers the worker next to the payload.
class DefaultPolicy final : public SchedulingPolicy {
 public:
  explicit DefaultPolicy(std::chrono::milliseconds aging_step) : aging_step_(aging_step) {}
  bool RunsBefore(const QueuedView& a, const QueuedView& b, TimePoint now) const override;
  WorkerId ChooseWorker(const QueuedView& job, const WorkerView* with_affinity,
                        const WorkerView& freest) const override;

 private:
  int EffectiveClass(const QueuedView& v, TimePoint now) const;
  std::chrono::milliseconds aging_step_;
};

}  // namespace sluice::orchestrator

#endif  // SLUICE_ORCHESTRATOR_CORE_POLICY_H_
