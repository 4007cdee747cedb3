// `sluice bench orchestrator`: the scheduler core alone, driven as fast as
// it goes: jobs through encode -> denoise -> decode on simulated workers
// that finish each assignment at once.
#ifndef SLUICE_BENCH_ORCHESTRATOR_BENCH_H_
#define SLUICE_BENCH_ORCHESTRATOR_BENCH_H_

#include <cstdint>
#include <string>

#include "sluice/status.h"

namespace sluice::bench {

struct OrchestratorBenchOptions {
  std::uint64_t jobs = 100000;
  int workers = 1000;  // Split evenly over the three stages.
};

struct OrchestratorBenchResult {
  OrchestratorBenchOptions options;
  std::uint64_t decisions = 0;  // Dispatches.
  std::uint64_t events = 0;
  double seconds = 0;  // Time inside the scheduler.
  double decisions_per_s = 0;
  double p50_event_us = 0;
  double p99_decision_us = 0;  // p99 time of an event that produced a decision.
};

Result<OrchestratorBenchResult> RunOrchestratorBench(const OrchestratorBenchOptions& o);
std::string ToJson(const OrchestratorBenchResult& r);

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_ORCHESTRATOR_BENCH_H_
