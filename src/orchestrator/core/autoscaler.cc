#include "orchestrator/core/autoscaler.h"

#include <algorithm>
#include <cmath>

namespace sluice::orchestrator {

Status ValidateAutoscaleOptions(const AutoscaleOptions& o) {
  if (!(o.target_utilization > 0 && o.target_utilization <= 1)) {
    return InvalidArgumentError("autoscale: target_utilization must be in (0, 1]");
  }
  if (!(o.scale_down_below >= 0 && o.scale_down_below < o.target_utilization)) {
    return InvalidArgumentError("autoscale: scale_down_below must be in [0, target_utilization)");
  }
  if (o.window.count() <= 0 || o.down_cooldown.count() < 0 || o.up_cooldown.count() < 0) {
    return InvalidArgumentError("autoscale: window must be > 0, cooldowns >= 0");
  }
  if (o.min_workers < 1 || o.max_workers < o.min_workers) {
    return InvalidArgumentError("autoscale: 1 <= min_workers <= max_workers");
  }
  return Status::Ok();
}

void Autoscaler::Observe(const std::vector<PoolLoad>& pools, TimePoint now) {
  for (const PoolLoad& s : pools) {
    Pool& p = pools_[{s.model, s.stage}];
    p.samples.push_back({now, s.workers, s.slots, s.busy_slots, static_cast<double>(s.queued)});
  }
  for (auto it = pools_.begin(); it != pools_.end();) {
    std::deque<Sample>& q = it->second.samples;
    while (!q.empty() && q.front().at + o_.window < now) {
      q.pop_front();
    }
    it = q.empty() ? pools_.erase(it) : std::next(it);
  }
}

std::vector<PoolRecommendation> Autoscaler::Recommend(TimePoint now) {
  std::vector<PoolRecommendation> out;
  for (auto& [key, p] : pools_) {
    double busy = 0, queued = 0, slots = 0;
    for (const Sample& s : p.samples) {
      busy += s.busy;
      queued += s.queued;
      slots += s.slots;
    }
    const double n = static_cast<double>(p.samples.size());
    const Sample& last = p.samples.back();
    PoolRecommendation r;
    r.model = key.first;
    r.stage = key.second;
    r.workers = last.workers;
    r.utilization = slots > 0 ? busy / slots : (busy > 0 ? 1.0 : 0.0);
    r.queued = queued / n;
    // Slots per worker as the pool has them now (1 when it has none).
    const double per_worker =
        last.workers > 0 ? static_cast<double>(last.slots) / last.workers : 1.0;
    // Below the target, the busy slots say what the load needs; at or
    // above it the pool may be saturated (busy capped at its slots), so
    // every queued job counts as wanting a slot too.
    const double demand = busy / n / o_.target_utilization +
                          (r.utilization >= o_.target_utilization ? r.queued : 0.0);
    const int want = std::clamp(static_cast<int>(std::ceil(demand / per_worker - 1e-9)),
                                o_.min_workers, o_.max_workers);
    // From the pool's own size, once it has workers (until then, its
    // demand alone).
    if (!p.seeded && last.workers > 0) {
      p.recommended = std::clamp(last.workers, o_.min_workers, o_.max_workers);
      p.seeded = true;
    }
    int rec = p.recommended > 0 ? p.recommended : o_.min_workers;
    // Quiet: nothing queued, and one worker fewer would still be below
    // the floor (so the smaller pool does not grow straight back, however
    // the load wobbles between the thresholds).
    // (The window's busy slots, not its utilization: the pool's size may
    // have changed within the window.)
    const double fewer = std::max(1, last.workers - 1) * per_worker;
    const bool quiet = r.queued < 0.5 && busy / n / fewer < o_.scale_down_below;
    if (!quiet) {
      p.low = false;
    } else if (!p.low) {
      p.low = true;
      p.low_since = now;
    }
    if (want > rec && (!p.changed || now - *p.changed >= o_.up_cooldown)) {
      rec = want;
      p.changed = now;
      p.low = false;
    } else if (want < rec && p.low && now - p.low_since >= o_.down_cooldown &&
               (!p.changed || now - *p.changed >= o_.down_cooldown)) {
      rec -= 1;  // One at a time: the pool drains it, then is measured again.
      p.changed = now;
      p.low_since = now;
    }
    p.recommended = rec;
    r.recommended = rec;
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace sluice::orchestrator
