// `sluice sim report`: a set of simulator runs per model, written as
// DIR/report.md with tables, the data behind every plot (.dat, columns
// separated by spaces), a gnuplot script (report.gp) and the PNGs it
// draws: latency and TTFF CDFs colocated against disaggregated, throughput
// and p99 against load, SLO attainment against the denoise:decode ratio
// N:M at equal GPUs, and pool utilization over time.
#ifndef SLUICE_SIM_REPORT_H_
#define SLUICE_SIM_REPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "sluice/runtime/model_profiles.h"
#include "sluice/status.h"

#include "orchestrator/core/policy.h"

namespace sluice::sim {

struct ReportModel {
  std::string model;  // A built-in profile (BuiltinModel).
  orchestrator::PriorityClass priority = orchestrator::PriorityClass::kStandard;
  int gpus = 64;              // Of the cluster for this model.
  double hours = 0;           // Simulated span of each run; 0: the report's.
  double load = 0.7;          // Offered load of the CDF, N:M and utilization runs.
  std::vector<double> loads;  // Of the throughput sweep.
  bool slo_on_ttff = false;   // The SLO is on TTFF's p99, else on latency's.
  double slo_p99_s = 0;
};

struct ReportConfig {
  std::string title = "sluice simulator report";
  double hours = 1;
  std::uint64_t seed = 1;
  double series_interval_s = 60;  // Of the utilization plots.
  // Of each GPU: a colocated decode pays its model's over-memory factor
  // where the model's colocated peak exceeds it.
  double gpu_memory_gb = ::sluice::kDefaultGpuMemoryGb;
  std::vector<ReportModel> models;
};

// Reads a report config (YAML):
//   title: TEXT            hours: H        seed: N      series_interval_s: S
//   gpu_memory_gb: G       (default 80)
//   models:
//     - model: flux-1024   priority: interactive|standard|batch
//       gpus: G   hours: H   load: L   loads: [L1, L2, ...]
//       slo: {metric: latency|ttff, p99_s: S}
// Every key is checked: an unknown one, a wrong type or a value out of
// range is kInvalidArgument naming the file and the key (models[i].key).
// Errors: kNotFound (no such file).
Result<ReportConfig> ReadReportConfig(const std::string& path);

struct ReportOutput {
  std::vector<std::string> files;  // Written under the directory.
  int simulations = 0;
  double wall_s = 0;
};

// Runs the config's simulations and writes the report under `dir`
// (created if missing; files of the same names replaced). The PNGs are
// drawn by running `gnuplot` (a path) on report.gp; "" writes everything
// but the PNGs and says so in report.md. Errors: kInvalidArgument (an
// unknown model; a config no run can take), kInternal (a file not
// writable, gnuplot failing: its last error line).
Result<ReportOutput> WriteReport(const ReportConfig& config, const std::string& dir,
                                 const std::string& gnuplot);

}  // namespace sluice::sim

#endif  // SLUICE_SIM_REPORT_H_
