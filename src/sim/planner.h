// The pool planner: the fewest GPUs per pool that meet a latency SLO at a
// given arrival rate, found by running the simulator (simulator.h), and
// the colocated GPU count that meets the same SLO, for comparison.
#ifndef SLUICE_SIM_PLANNER_H_
#define SLUICE_SIM_PLANNER_H_

#include <vector>

#include "sluice/runtime/model_profiles.h"
#include "sluice/status.h"

#include "sim/simulator.h"

namespace sluice::sim {

struct PlanRequest {
  ModelProfile model;
  double rate_per_s = 1;     // Poisson arrivals.
  double slo_p99_s = 10;     // Latency, submission to result, at the 99th percentile,
  bool slo_on_ttff = false;  // or, with this, time to first frame.
  orchestrator::PriorityClass priority = orchestrator::PriorityClass::kStandard;
  double hours = 1;  // Simulated span of each trial.
  std::uint64_t seed = 1;
  int max_gpus = 100000;  // Per plan; beyond it the SLO is reported unmet.
  // No pool of a plan runs busier than this: a trial's finite span hides
  // the queue a pool near saturation grows over a longer one (or in a
  // burst), so a plan that meets the SLO only there is not one. (0, 1].
  double max_utilization = 0.95;
  // Of each GPU: the colocated plan's decode pays the model's
  // over-memory factor where its colocated peak exceeds it
  // (ColocatedDecodePenalty).
  double gpu_memory_gb = ::sluice::kDefaultGpuMemoryGb;
  // The largest batch planned for the admission pool where the model's
  // admission stage has a batch_gain curve (1: none). [1, 1024].
  int max_batch = 16;
};

struct PlanResult {
  // Disaggregated: one per stage; the admission pool's capacity is its
  // batch size (1 without batching).
  std::vector<PoolSize> pools;
  int gpus = 0;
  SimResult disaggregated;  // The run at `pools`.
  int colocated_gpus = 0;   // One pool running every stage (Colocated),
  int colocated_batch = 1;  // in batches of this many.
  SimResult colocated;
  int simulations = 0;  // Trials run.
};

// A plan meets the SLO when every job of its trial finished, the trial's
// p99 latency (or TTFF) is within it, and no pool was busier than
// max_utilization. Searches up from the demand
// (rate x service time per stage), growing the busiest pool by a tenth
// until the SLO holds, then trims each pool to the fewest GPUs that still
// hold it; likewise for the colocated pool. Where the admission stage
// batches (StageProfile::batch_gain), each batch size its curve gains at
// (up to max_batch) is searched so, and the one needing the fewest GPUs
// is planned (a larger batch serves more per GPU but slows each job, so
// a tight SLO may pick a smaller one). Deterministic for a seed.
// Errors: kInvalidArgument (a rate, SLO, span or GPU memory not > 0, a
// utilization cap outside (0, 1], max_batch outside [1, 1024]; an SLO below the
// model's own service time, which no pool size can meet);
// kResourceExhausted (no plan within max_gpus).
Result<PlanResult> Plan(const PlanRequest& request);

std::string ToJson(const PlanResult& r);

}  // namespace sluice::sim

#endif  // SLUICE_SIM_PLANNER_H_
