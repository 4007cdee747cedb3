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

  AutoscaleOptions o_;
  std::map<std::pair<std::string, std::string>, Pool> pools_;
};

}  // namespace sluice::orchestrator

#endif  // SLUICE_ORCHESTRATOR_CORE_AUTOSCALER_H_
