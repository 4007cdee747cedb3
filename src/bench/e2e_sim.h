// The simulator's replay of a `sluice bench e2e` run, for calibration: the
// same workers as the embedded deployment (src/serve/embedded.cc) as sim
// pools, the profile stages' timings at the run's time factor (exact: the
// stages sleep them), the run's very arrivals (PlanE2eArrivals, warm-up
// served but not counted), and its figures computed as the bench computes
// them. What the simulator cannot know of this machine it is told, as
// four costs measured from a job's event timeline here (README,
// "Calibration"): a stage's dispatch with its input and output through the
// store (gRPC, shared memory), a denoise step's sleep overshooting, the
// result's trip from the last stage to the orchestrator, and the first
// output's.
#ifndef SLUICE_BENCH_E2E_SIM_H_
#define SLUICE_BENCH_E2E_SIM_H_

#include <string>

#include "sluice/status.h"

#include "bench/e2e_bench.h"
#include "sim/simulator.h"

namespace sluice::bench {

struct E2eSimOptions {
  double dispatch_s = 0.003;  // Per stage dispatch, as the links' one-way latency.
  double step_s = 0.0001;     // Per denoise step, on top of its time.
  double result_s = 0.004;    // Per job, on its last stage.
  // A first output's trip to the orchestrator (a heartbeat sent at once).
  double first_output_s = 0.0005;
  double link_gbps = 40;  // Payloads through the store (shared memory).
};

// The sim config of run `o`. Errors: kInvalidArgument (bad options; the
// reference workload, which has no profile to simulate).
Result<sim::SimConfig> E2eSimConfig(const E2eBenchOptions& o, const E2eSimOptions& s);

// Simulates run `o`: the result the bench would print, from the
// simulator (utilization: each pool's busy share over the arrival window).
Result<E2eBenchResult> SimulateE2e(const E2eBenchOptions& o, const E2eSimOptions& s);

// {"measured": ..., "simulated": ..., "sim_over_measured": {p50_latency,
// p99_latency, p50_ttff, p99_ttff, throughput}} (a ratio is 0 where the
// measured figure is).
std::string CalibrationJson(const E2eBenchResult& measured, const E2eBenchResult& simulated);

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_E2E_SIM_H_
