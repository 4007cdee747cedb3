// sluice/orchestrator/autoscale.h
//
// What the orchestrator recommends for each pool's size (GET
// /v1/autoscale, the metric sluice_orchestrator_recommended_workers), for
// an external autoscaler such as a Kubernetes HPA, and what `sluice serve
// --elastic` applies to its own pools. The policy (orchestrator/core/
// autoscaler.h), over samples averaged across `window`: demand is a pool's
// busy slots over `target_utilization`, plus its queued jobs once it is at
// the target (saturated, its busy slots no longer show the load). A pool
// grows to its demand at once (at most every `up_cooldown`) and shrinks
// one worker at a time, only after it stayed quiet for `down_cooldown`:
// nothing queued, and its load on one worker fewer still below
// `scale_down_below` (so it does not grow straight back).
#ifndef SLUICE_ORCHESTRATOR_AUTOSCALE_H_
#define SLUICE_ORCHESTRATOR_AUTOSCALE_H_

#include <chrono>
#include <cstddef>
#include <string>

namespace sluice {

struct AutoscaleOptions {
  std::chrono::milliseconds window{10000};  // Samples (ten a second) averaged over this span.
  double target_utilization = 0.75;         // Busy slots over slots to size for.
  double scale_down_below = 0.5;            // Shrink only below this utilization,
  std::chrono::milliseconds down_cooldown{30000};  // held this long.
  std::chrono::milliseconds up_cooldown{5000};     // Between two changes upward.
  int min_workers = 1;                             // Per pool.
  int max_workers = 64;
};

// One pool (model, stage) of the scheduler at one instant.
struct PoolLoad {
  std::string model, stage;
  int workers = 0;         // Registered and taking work.
  int slots = 0;           // Their slots in all.
  double busy_slots = 0;   // Holding an assignment.
  std::size_t queued = 0;  // Jobs waiting for the stage.
};

struct PoolRecommendation {
  std::string model, stage;
  int workers = 0;         // Registered and taking work now.
  int recommended = 0;     // What the pool should have.
  double utilization = 0;  // Busy slots over slots, averaged over the window.
  double queued = 0;       // Jobs waiting for the stage, averaged over the window.
};

}  // namespace sluice

#endif  // SLUICE_ORCHESTRATOR_AUTOSCALE_H_
