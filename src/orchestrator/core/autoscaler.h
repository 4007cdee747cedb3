// The pool autoscaler (the policy of sluice/orchestrator/autoscale.h):
// from what each pool does over a sliding window (busy slots, queued jobs,
// sampled by whoever runs it, e.g. once a second), the worker count it
// should have, with hysteresis so a pool does not flap. Pure policy, no
// I/O, any clock: the orchestrator samples its scheduler and publishes the
// recommendations; `sluice serve --elastic` applies them to its pools.
//
// Thread safety: none (the caller serializes).
#ifndef SLUICE_ORCHESTRATOR_CORE_AUTOSCALER_H_
#define SLUICE_ORCHESTRATOR_CORE_AUTOSCALER_H_

#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sluice/orchestrator/autoscale.h"
#include "sluice/status.h"

#include "orchestrator/core/policy.h"

namespace sluice::orchestrator {

using ::sluice::AutoscaleOptions;
using ::sluice::PoolLoad;
using ::sluice::PoolRecommendation;

// Errors: kInvalidArgument naming the bad field (a target outside (0, 1],
// scale_down_below not below it, a window or cooldown below 0, bounds
// below 1 or crossed).
Status ValidateAutoscaleOptions(const AutoscaleOptions& o);

class Autoscaler {
 public:
  explicit Autoscaler(AutoscaleOptions o) : o_(o) {}

  // Adds one sample of every pool taken at `now` (times never decrease).
  // A pool missing from a sample keeps its history until the window
  // passes it.
  void Observe(const std::vector<PoolLoad>& pools, TimePoint now);

  // A job of `model` finished at `now`, `latency_s` after its submission
  // (kept only with an SLO; the window's last 65536 per model at most).
  // After the SLO grew one of the model's pools, only jobs submitted since
  // say whether it still misses (the window still holds older ones).
  void ObserveLatency(const std::string& model, double latency_s, TimePoint now);

  // What each pool seen in the window should have now; a change counts
  // from here for the cooldowns (call it once per decision).
  std::vector<PoolRecommendation> Recommend(TimePoint now);

 private:
  struct Sample {
    TimePoint at;
    int workers = 0, slots = 0;
    double busy = 0, queued = 0;
  };
  struct Pool {
    std::deque<Sample> samples;
    int recommended = 0;               // 0: none yet.
    std::optional<TimePoint> changed;  // Its recommendation's last change.
    TimePoint low_since{};             // Start of the current below-threshold run.
    bool low = false;
    bool seeded = false;  // `recommended` started from its workers.
  };
  // A pool's samples over the window: sums of busy slots, queued jobs and
  // slots, and the busy share of its slots.
  struct WindowLoad {
    double busy = 0, queued = 0, slots = 0, utilization = 0;
  };
  static WindowLoad LoadOf(const Pool& p);

  // A model's jobs finished in the window: their p99 latency, and the
  // p99 of those submitted since the SLO last grew one of its pools
  // (what that growth changed; -1: none yet).
  struct ModelLatency {
    double p99 = 0, p99_since_growth = -1;
  };
  std::map<std::string, ModelLatency> Latencies() const;

  AutoscaleOptions o_;
  std::map<std::pair<std::string, std::string>, Pool> pools_;
  // Per model: (finished at, latency in seconds), oldest first.
  std::map<std::string, std::deque<std::pair<TimePoint, double>>> latencies_;
  std::map<std::string, TimePoint> slo_grew_;  // Per model: the SLO's last growth.
};

}  // namespace sluice::orchestrator

#endif  // SLUICE_ORCHESTRATOR_CORE_AUTOSCALER_H_
