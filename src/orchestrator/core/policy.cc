#include "orchestrator/core/policy.h"

#include <algorithm>
#include <climits>
#include <tuple>

namespace sluice::orchestrator {

int DefaultPolicy::EffectiveClass(const QueuedView& v, TimePoint now) const {
  const int cls = static_cast<int>(v.priority);
  if (aging_step_.count() <= 0) {
    return cls;
  }
  const auto promotions = static_cast<int>((now - v.queued_at) / aging_step_);
  return std::max(0, cls - promotions);
}

bool DefaultPolicy::RunsBefore(const QueuedView& a, const QueuedView& b, TimePoint now) const {
  auto rank = [&](const QueuedView& v) {
    const std::int64_t deadline =
        v.deadline.has_value() ? v.deadline->time_since_epoch().count() : INT64_MAX;
    return std::make_tuple(EffectiveClass(v, now), deadline, v.seq);
  };
  return rank(a) < rank(b);
}

WorkerId DefaultPolicy::ChooseWorker(const QueuedView&, const WorkerView* with_affinity,
                                     const WorkerView& freest) const {
  return with_affinity != nullptr ? with_affinity->id : freest.id;
}

}  // namespace sluice::orchestrator
