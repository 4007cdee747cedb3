// `sluice sim`: the cluster simulator (src/sim/) on a built-in workload:
// pools sized by demand for GPUS GPUs, a simulated span of HOURS, and what
// came of it per class (throughput, latency and time-to-first-frame
// percentiles) and per pool (utilization, longest queue).
#include <cstdio>
#include <iostream>
#include <memory>

#include "sim/simulator.h"
#include "sim/workloads.h"
#include "tools/sluice_cli/commands.h"

namespace sluice::cli {
namespace {

struct SimOptions {
  int gpus = 64;
  double hours = 1;
  std::string workload = "mixed";
  double load = 0.7;
  std::uint64_t seed = 1;
  double mtbf_hours = 0;
  double repair_s = 60;
  bool colocated = false;
  bool json = false;
};

int RunSim(const SimOptions& o) {
  Result<sim::SimConfig> c =
      sim::BuiltinWorkload(o.workload, o.gpus, o.hours, o.load, o.seed, o.colocated);
  if (!c.ok()) {
    std::cerr << "sluice sim: " << c.status().message() << "\n";
    return 2;
  }
  c->mtbf_s = o.mtbf_hours * 3600;
  c->repair_s = o.repair_s;
  Result<sim::SimResult> r = sim::Simulate(*c);
  if (!r.ok()) {
    std::cerr << "sluice sim: " << r.status().ToString() << "\n";
    return 1;
  }
  if (o.json) {
    std::cout << sim::ToJson(*r) << std::endl;
    return 0;
  }
  std::printf("%-18s %-11s %9s %9s %10s %9s %9s %9s\n", "model", "class", "completed", "jobs/s",
              "unfinished", "p50 s", "p99 s", "ttff p99");
  for (const sim::ClassResult& k : r->classes) {
    const char* cls = k.priority == orchestrator::PriorityClass::kInteractive ? "interactive"
                      : k.priority == orchestrator::PriorityClass::kBatch     ? "batch"
                                                                              : "standard";
    std::printf("%-18s %-11s %9llu %9.3f %10llu %9.2f %9.2f %9.2f\n", k.model.c_str(), cls,
                static_cast<unsigned long long>(k.completed), k.throughput_per_s,
                static_cast<unsigned long long>(k.unfinished), k.latency_s.p50, k.latency_s.p99,
                k.ttff_s.p99);
  }
  std::printf("\n%-18s %-8s %6s %11s %10s\n", "model", "stage", "gpus", "utilization", "max queue");
  for (const sim::PoolResult& p : r->pools) {
    std::printf("%-18s %-8s %6d %11.3f %10zu\n", p.model.c_str(), p.stage.c_str(), p.gpus,
                p.utilization, p.max_queued);
  }
  std::printf("\n%llu scheduler events, %.0f s simulated in %.2f s, peak RSS %.0f MiB\n",
              static_cast<unsigned long long>(r->events), r->simulated_s, r->wall_s,
              static_cast<double>(r->peak_rss_bytes) / (1 << 20));
  return 0;
}

}  // namespace

void AddSimCommand(CLI::App& app, std::vector<Command>* out) {
  auto o = std::make_shared<SimOptions>();
  CLI::App* cmd = app.add_subcommand(
      "sim", "simulate a cluster on a virtual clock, with the orchestrator's own scheduler");
  cmd->add_option("--gpus", o->gpus, "GPUs, split into pools by demand")
      ->check(CLI::Range(3, 1000000))
      ->capture_default_str();
  cmd->add_option("--hours", o->hours, "simulated hours of arrivals (the run then drains)")
      ->check(CLI::Range(0.001, 1000.0))
      ->capture_default_str();
  cmd->add_option("--workload", o->workload,
                  "image (FLUX 1024², interactive), video (Wan 480p, standard) or mixed (half "
                  "the GPUs each; videos batch)")
      ->check(CLI::IsMember({"image", "video", "mixed"}))
      ->capture_default_str();
  cmd->add_option("--load", o->load, "target utilization of the denoise pools (arrival rates)")
      ->check(CLI::Range(0.01, 2.0))
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "random seed (same seed, same result)")->capture_default_str();
  cmd->add_option("--mtbf-hours", o->mtbf_hours, "mean time between failures per GPU (0: none)")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  cmd->add_option("--repair-s", o->repair_s, "how long a failed GPU stays out")
      ->check(CLI::Range(1.0, 1e6))
      ->capture_default_str();
  cmd->add_flag("--colocated", o->colocated,
                "each GPU runs every stage of a job (the same arrivals as disaggregated; video "
                "decodes tiled beside the DiT at 1.3x)");
  cmd->add_flag("--json", o->json, "print one JSON object");
  out->push_back({cmd, [o] { return RunSim(*o); }});
}

}  // namespace sluice::cli
