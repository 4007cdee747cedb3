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
//
// With a latency SLO (`slo_p99` > 0), the jobs' latencies (submission to
// result) over the window count too: while a model's p99 is above the
// SLO, its busiest pool grows by one worker beyond its demand every
// `up_cooldown`, until the SLO holds again; and none of its pools shrinks
// while its p99 is above `slo_shrink_below` x the SLO. (The window lags:
// jobs that finished before a change still count until it passes them.)
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
  std::chrono::milliseconds slo_p99{0};  // Jobs' p99 latency to hold; 0: none.
  double slo_shrink_below = 0.8;         // Of the SLO: shrink only under it.
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
  // The p99 latency of the model's jobs finished in the window, seconds
  // (0: none finished, or no SLO set).
  double latency_p99_s = 0;
};

}  // namespace sluice

#endif  // SLUICE_ORCHESTRATOR_AUTOSCALE_H_
