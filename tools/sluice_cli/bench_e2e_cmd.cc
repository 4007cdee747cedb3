// `sluice bench e2e` and `sluice bench sharing`: embedded deployments of
// stage workers serving an open-loop stream over HTTP, and the
// simulator's replays of them.
#include <iostream>
#include <memory>

#include "bench/e2e_bench.h"
#include "bench/e2e_sim.h"
#include "bench/sharing_bench.h"
#include "sluice_cli/bench_report.h"
#include "sluice_cli/commands.h"

namespace sluice::cli {
namespace {

// The options of one run (both commands) and of its simulated replay.
void AddRunOptions(CLI::App* cmd, bench::E2eBenchOptions& b, bench::E2eSimOptions& s) {
  cmd->add_option("--workload", b.workload, "reference, wan480-profile, flux-profile or mixed")
      ->check(CLI::IsMember({"reference", "wan480-profile", "flux-profile", "mixed"}))
      ->capture_default_str();
  cmd->add_option("--workers", b.workers, "stage workers in all (equal across modes)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--rate", b.rate, "job arrivals per second (Poisson)")
      ->check(CLI::Range(0.001, 1000.0))
      ->capture_default_str();
  cmd->add_option("--duration", b.duration_s, "arrival window, seconds")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  cmd->add_option("--warmup", b.warmup_s, "seconds of arrivals served, not measured")
      ->check(CLI::Range(0.0, 600.0))
      ->capture_default_str();
  cmd->add_option("--time-factor", b.time_factor, "profile timings scale")
      ->check(CLI::Range(1e-6, 1.0))
      ->capture_default_str();
  cmd->add_option("--latent-chunks", b.latent_chunks,
                  "profile videos: the latent handed to decode in this many chunks along its "
                  "frames, decoded as they land (1: whole)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--encode-workers", b.encode_workers,
                  "light stages in pools: encode workers of their own")
      ->check(CLI::Range(1, 63))
      ->capture_default_str();
  cmd->add_option("--sim-dispatch-s", s.dispatch_s,
                  "simulated: what a stage's dispatch, input and output add to its time here")
      ->check(CLI::Range(0.0, 9.0))
      ->capture_default_str();
  cmd->add_option("--sim-step-s", s.step_s, "simulated: what a denoise step adds here")
      ->check(CLI::Range(0.0, 9.0))
      ->capture_default_str();
  cmd->add_option("--sim-first-output-s", s.first_output_s,
                  "simulated: what a first output's report to the orchestrator takes here")
      ->check(CLI::Range(0.0, 9.0))
      ->capture_default_str();
  cmd->add_option("--sim-result-s", s.result_s,
                  "simulated: what a job's result adds on its way to the orchestrator here")
      ->check(CLI::Range(0.0, 9.0))
      ->capture_default_str();
}

int RunE2e(const bench::E2eBenchOptions& b, const bench::E2eSimOptions& s,
           const std::string& simulate) {
  if (simulate == "measured") {
    return Report("e2e", bench::RunE2eBench(b));
  }
  if (simulate == "simulated") {
    return Report("e2e", bench::SimulateE2e(b, s));
  }
  // Validated (the reference workload refused) before the run.
  if (Result<sim::SimConfig> c = bench::E2eSimConfig(b, s); !c.ok()) {
    return Report("e2e", Result<bench::E2eBenchResult>(c.status()));
  }
  Result<bench::E2eBenchResult> measured = bench::RunE2eBench(b);
  Result<bench::E2eBenchResult> simulated = bench::SimulateE2e(b, s);
  for (const auto* r : {&measured, &simulated}) {
    if (!r->ok()) {
      return Report("e2e", *r);
    }
  }
  std::cout << bench::CalibrationJson(*measured, *simulated) << std::endl;
  return 0;
}

void AddE2e(CLI::App& bench, std::vector<Command>* out) {
  struct Opts {
    bench::E2eBenchOptions b;
    bench::E2eSimOptions s;
    std::string simulate = "measured";
    bool json = true;
  };
  auto o = std::make_shared<Opts>();
  bench::E2eBenchOptions& b = o->b;
  CLI::App* cmd = bench.add_subcommand(
      "e2e", "jobs through an embedded deployment over HTTP: throughput, latency, TTFF");
  AddRunOptions(cmd, b, o->s);
  cmd->add_option("--mode", b.mode, "disagg or colocated")
      ->check(CLI::IsMember({"disagg", "colocated"}))
      ->capture_default_str();
  cmd->add_option("--light-stages", b.light_stages,
                  "disagg: encode/decode on every denoise worker (shared), one edge worker "
                  "(edge), or pools of their own running one at a time (pools)")
      ->check(CLI::IsMember({"shared", "edge", "pools"}))
      ->capture_default_str();
  cmd->add_option("--decode-workers", b.decode_workers,
                  "light stages in pools: decode workers of their own")
      ->check(CLI::Range(1, 63))
      ->capture_default_str();
  cmd->add_option("--denoise-batch", b.denoise_batch,
                  "reference workload: denoise workers batch the steps of up to this many jobs "
                  "(1: each job alone)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--simulate", o->simulate,
                  "measured: run it (default); simulated: only the simulator's replay of it "
                  "(same workers, timings and arrivals); both: run it, replay it, and print "
                  "the simulated figures over the measured ones")
      ->check(CLI::IsMember({"measured", "simulated", "both"}))
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "print one JSON object (the only output format)");
  out->push_back({cmd, [o] { return RunE2e(o->b, o->s, o->simulate); }});
}

void AddSharing(CLI::App& bench, std::vector<Command>* out) {
  struct Opts {
    bench::SharingBenchOptions b;
    bool json = true;
  };
  auto o = std::make_shared<Opts>();
  bench::SharingBenchOptions& b = o->b;
  b.run.workload = "flux-profile";
  b.run.workers = 12;
  b.run.time_factor = 0.2;
  CLI::App* cmd = bench.add_subcommand(
      "sharing",
      "benchmark (c) for real: N denoise : M decode workers swept over M at one load, and "
      "colocated on as many, against an SLO");
  AddRunOptions(cmd, b.run, b.sim);
  cmd->add_option("--decode", b.decode_workers, "decode worker counts to sweep, e.g. 1,2,3")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--slo-ttff-p99", b.slo_ttff_p99_s,
                  "p99 TTFF the SLO allows, in the run's seconds (interactive jobs' in mixed)")
      ->capture_default_str();
  cmd->add_option("--slo-latency-p99", b.slo_latency_p99_s,
                  "p99 latency of every job the SLO allows, run's seconds (0: none)")
      ->capture_default_str();
  cmd->add_option("--simulate", b.simulate,
                  "measured: run each point; simulated: only replay it; both (default)")
      ->check(CLI::IsMember({"measured", "simulated", "both"}))
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "print one JSON object (the only output format)");
  out->push_back({cmd, [o] { return Report("sharing", bench::RunSharingBench(o->b)); }});
}

}  // namespace

void AddE2eCommands(CLI::App& bench, std::vector<Command>* out) {
  AddE2e(bench, out);
  AddSharing(bench, out);
}

}  // namespace sluice::cli
