// `sluice bench orchestrator`: the scheduler core alone, driven as fast as
// it goes: jobs through encode -> denoise -> decode on simulated workers
// that finish each assignment at once. With a backlog, the submissions run
// that many jobs ahead of the completions (a deep queue), and the same
// run without one is the baseline its rate is given against.
#ifndef SLUICE_BENCH_ORCHESTRATOR_BENCH_H_
#define SLUICE_BENCH_ORCHESTRATOR_BENCH_H_

#include <cstdint>
#include <string>

#include "sluice/status.h"

namespace sluice::bench {

struct OrchestratorBenchOptions {
  std::uint64_t jobs = 100000;
  int workers = 1000;  // Split evenly over the three stages.
  // Jobs kept in the system (queued or running) while the rest are
  // submitted, 0..1,000,000; 0: as many as the workers' slots keep busy.
  std::uint64_t backlog = 0;
};

struct OrchestratorBenchResult {
  OrchestratorBenchOptions options;
  std::uint64_t decisions = 0;  // Dispatches.
  std::uint64_t events = 0;
  double seconds = 0;  // Time inside the scheduler.
  double decisions_per_s = 0;
  double p50_event_us = 0;
  double p99_decision_us = 0;  // p99 time of an event that produced a decision.
  // With a backlog: the deepest queue seen (all pools), and the same run
  // without a backlog, whose decisions_per_s is the ratio's baseline.
  std::uint64_t max_queued = 0;
  double baseline_decisions_per_s = 0;
};

// Errors: kInvalidArgument naming the option out of range; kInternal if
// the scheduler ends with jobs unfinished.
Result<OrchestratorBenchResult> RunOrchestratorBench(const OrchestratorBenchOptions& o);
std::string ToJson(const OrchestratorBenchResult& r);

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_ORCHESTRATOR_BENCH_H_
