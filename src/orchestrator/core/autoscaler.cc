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
  if (o.slo_p99.count() < 0 || !(o.slo_shrink_below > 0 && o.slo_shrink_below <= 1)) {
    return InvalidArgumentError(
        "autoscale: slo_p99 must be >= 0 (0: none) and slo_shrink_below in (0, 1]");
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
  for (auto it = latencies_.begin(); it != latencies_.end();) {
    auto& q = it->second;
    while (!q.empty() && q.front().first + o_.window < now) {
      q.pop_front();
    }
    it = q.empty() ? latencies_.erase(it) : std::next(it);
  }
}

void Autoscaler::ObserveLatency(const std::string& model, double latency_s, TimePoint now) {
  if (o_.slo_p99.count() <= 0) {
    return;
  }
  auto& q = latencies_[model];
  if (q.size() >= 65536) {
    q.pop_front();
  }
  q.emplace_back(now, latency_s);
}

namespace {

// The 99th percentile of `v` (reordered); -1 when empty.
double P99(std::vector<double>& v) {
  if (v.empty()) {
    return -1;
  }
  const auto k = static_cast<std::ptrdiff_t>(std::ceil(0.99 * static_cast<double>(v.size())) - 1);
  std::nth_element(v.begin(), v.begin() + k, v.end());
  return v[static_cast<std::size_t>(k)];
}

}  // namespace

std::map<std::string, Autoscaler::ModelLatency> Autoscaler::Latencies() const {
  std::map<std::string, ModelLatency> out;
  std::vector<double> all, fresh;
  for (const auto& [model, q] : latencies_) {
    all.clear();
    fresh.clear();
    const auto grew = slo_grew_.find(model);
    for (const auto& [at, s] : q) {
      all.push_back(s);
      const auto submitted =
          at - std::chrono::duration_cast<TimePoint::duration>(std::chrono::duration<double>(s));
      if (grew == slo_grew_.end() || submitted >= grew->second) {
        fresh.push_back(s);
      }
    }
    out[model] = {P99(all), P99(fresh)};
  }
  return out;
}

Autoscaler::WindowLoad Autoscaler::LoadOf(const Pool& p) {
  WindowLoad w;
  for (const Sample& s : p.samples) {
    w.busy += s.busy;
    w.queued += s.queued;
    w.slots += s.slots;
  }
  w.utilization = w.slots > 0 ? w.busy / w.slots : (w.busy > 0 ? 1.0 : 0.0);
  return w;
}

std::vector<PoolRecommendation> Autoscaler::Recommend(TimePoint now) {
  std::vector<PoolRecommendation> out;
  const std::map<std::string, ModelLatency> latency = Latencies();
  const double slo_s = std::chrono::duration<double>(o_.slo_p99).count();
  std::map<std::pair<std::string, std::string>, WindowLoad> loads;
  // Each model's busiest pool over the window: where a missed SLO adds.
  std::map<std::string, std::pair<double, std::string>> busiest;
  for (const auto& [key, p] : pools_) {
    const WindowLoad& w = loads[key] = LoadOf(p);
    auto [it, added] = busiest.try_emplace(key.first, w.utilization, key.second);
    if (!added && w.utilization > it->second.first) {
      it->second = {w.utilization, key.second};
    }
  }
  for (auto& [key, p] : pools_) {
    const WindowLoad& w = loads[key];
    const double busy = w.busy;
    const double n = static_cast<double>(p.samples.size());
    const Sample& last = p.samples.back();
    PoolRecommendation r;
    r.model = key.first;
    r.stage = key.second;
    r.workers = last.workers;
    r.utilization = w.utilization;
    r.queued = w.queued / n;
    // Slots per worker as the pool has them now (1 when it has none).
    const double per_worker =
        last.workers > 0 ? static_cast<double>(last.slots) / last.workers : 1.0;
    // Below the target, the busy slots say what the load needs; at or
    // above it the pool may be saturated (busy capped at its slots), so
    // every queued job counts as wanting a slot too.
    const double demand = busy / n / o_.target_utilization +
                          (r.utilization >= o_.target_utilization ? r.queued : 0.0);
    int want = std::clamp(static_cast<int>(std::ceil(demand / per_worker - 1e-9)), o_.min_workers,
                          o_.max_workers);
    // From the pool's own size, once it has workers (until then, its
    // demand alone).
    if (!p.seeded && last.workers > 0) {
      p.recommended = std::clamp(last.workers, o_.min_workers, o_.max_workers);
      p.seeded = true;
    }
    int rec = p.recommended > 0 ? p.recommended : o_.min_workers;
    // The SLO: missed (by jobs submitted since it last grew a pool of the
    // model), the model's busiest pool wants one worker more than it has;
    // near it (any job of the window), no pool of the model shrinks.
    const auto l = latency.find(key.first);
    const ModelLatency m = l == latency.end() ? ModelLatency{} : l->second;
    r.latency_p99_s = std::max(0.0, m.p99);
    const bool missed = slo_s > 0 && m.p99_since_growth > slo_s;
    const bool near = slo_s > 0 && m.p99 > o_.slo_shrink_below * slo_s;
    const bool slo_grows = missed && busiest[key.first].second == key.second;
    if (slo_grows) {
      want = std::max(want, std::min(o_.max_workers, rec + 1));
    }
    // Quiet: nothing queued, and one worker fewer would still be below
    // the floor (so the smaller pool does not grow straight back, however
    // the load wobbles between the thresholds).
    // (The window's busy slots, not its utilization: the pool's size may
    // have changed within the window.)
    const double fewer = std::max(1, last.workers - 1) * per_worker;
    const bool quiet = r.queued < 0.5 && busy / n / fewer < o_.scale_down_below && !near;
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
      if (slo_grows) {
        slo_grew_[key.first] = now;
      }
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
