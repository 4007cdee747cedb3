// `sluice sim`: the cluster simulator (src/sim/) on a built-in workload:
// pools sized by demand for GPUS GPUs, a simulated span of HOURS, and what
// came of it per class (throughput, latency and time-to-first-frame
// percentiles) and per pool (utilization, longest queue). `sluice plan`:
// the fewest GPUs per pool meeting a p99 latency SLO at an arrival rate,
// and the colocated count for the same SLO (src/sim/planner.h).
// `sluice sim report CONFIG -o DIR`: the report of src/sim/report.h.
// `sluice sim overlap`: benchmark (b) at real sizes (src/sim/overlap.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "sluice/runtime/model_profiles.h"

#include "common/subprocess.h"
#include "sim/overlap.h"
#include "sim/planner.h"
#include "sim/report.h"
#include "sim/simulator.h"
#include "sim/trace.h"
#include "sim/workloads.h"
#include "sluice_cli/commands.h"

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
  double gpu_memory_gb = kDefaultGpuMemoryGb;
  double store_gb = 0;
  double burst_factor = 1, burst_every_s = 600, burst_s = 60;
  std::string trace;
  bool json = false;
};

int RunSim(const SimOptions& o) {
  Result<sim::SimConfig> c = sim::BuiltinWorkload(o.workload, o.gpus, o.hours, o.load, o.seed,
                                                  o.colocated, o.gpu_memory_gb);
  if (!c.ok()) {
    std::cerr << "sluice sim: " << c.status().message() << "\n";
    return 2;
  }
  if (!o.trace.empty()) {
    Result<std::vector<sim::TracedJob>> t = sim::ReadTraceCsv(o.trace);
    if (!t.ok()) {
      std::cerr << "sluice sim: --trace: " << t.status().message() << "\n";
      return 2;
    }
    c->arrivals.clear();
    c->trace = std::move(*t);
    c->duration_s = std::max(1e-3, c->trace.back().t_s);
  }
  c->mtbf_s = o.mtbf_hours * 3600;
  c->repair_s = o.repair_s;
  c->store_bytes = o.store_gb * 1e9;
  for (sim::Arrivals& a : c->arrivals) {
    a.burst_factor = o.burst_factor;
    a.burst_every_s = o.burst_every_s;
    a.burst_s = o.burst_s;
  }
  Result<sim::SimResult> r = sim::Simulate(*c);
  if (!r.ok()) {
    std::cerr << "sluice sim: " << r.status().message() << "\n";
    return r.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  if (o.json) {
    std::cout << sim::ToJson(*r) << std::endl;
    return 0;
  }
  std::printf("%-18s %-11s %9s %9s %10s %9s %9s %9s\n", "model", "class", "completed", "jobs/s",
              "unfinished", "p50 s", "p99 s", "ttff p99");
  for (const sim::ClassResult& k : r->classes) {
    const char* cls = orchestrator::PriorityName(k.priority);
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
  if (o.store_gb > 0) {
    std::printf(
        "\nstore %.1f GB: peak %.2f GB; %llu stage ends waited for room, %.1f s in all, "
        "%.2f s at most\n",
        o.store_gb, r->store_peak_bytes / 1e9, static_cast<unsigned long long>(r->store_waits),
        r->store_wait_s, r->store_wait_max_s);
  }
  std::printf("\n%llu scheduler events, %.0f s simulated in %.2f s, peak RSS %.0f MiB\n",
              static_cast<unsigned long long>(r->events), r->simulated_s, r->wall_s,
              static_cast<double>(r->peak_rss_bytes) / (1 << 20));
  return 0;
}

struct PlanOptions {
  std::string model = "flux-1024";
  double rate = 10;
  double slo_p99_s = 6;
  std::string priority = "standard";
  double hours = 0.5;
  std::uint64_t seed = 1;
  int max_gpus = 100000;
  double max_utilization = 0.95;
  double gpu_memory_gb = kDefaultGpuMemoryGb;
  std::vector<double> batch_gain;  // Empty: the model's own curve.
  int max_batch = 16;
  bool json = false;
};

int RunPlan(const PlanOptions& o) {
  Result<sim::ModelProfile> m = sim::BuiltinModel(o.model);
  if (!m.ok()) {
    std::cerr << "sluice plan: --model: " << m.status().message() << "\n";
    return 2;
  }
  if (!o.batch_gain.empty()) {
    bool good = o.batch_gain.size() <= 1024 && o.batch_gain.front() == 1;
    for (double g : o.batch_gain) {
      good = good && g > 0 && std::isfinite(g);
    }
    if (!good) {
      std::cerr << "sluice plan: --batch-gain: the throughput of batches of 1, 2, ... over one "
                   "job alone: starts at 1, each > 0, at most 1024 of them\n";
      return 2;
    }
    m->stages[sim::AdmissionStage(*m)].batch_gain = o.batch_gain;
  }
  sim::PlanRequest r;
  r.model = std::move(*m);
  r.max_batch = o.max_batch;
  r.rate_per_s = o.rate;
  r.slo_p99_s = o.slo_p99_s;
  // --priority allows only the class names.
  r.priority = orchestrator::ParsePriority(o.priority).value_or(r.priority);
  r.hours = o.hours;
  r.seed = o.seed;
  r.max_gpus = o.max_gpus;
  r.gpu_memory_gb = o.gpu_memory_gb;
  r.max_utilization = o.max_utilization;
  Result<sim::PlanResult> p = sim::Plan(r);
  if (!p.ok()) {
    std::cerr << "sluice plan: " << p.status().message() << "\n";
    return p.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  if (o.json) {
    std::cout << sim::ToJson(*p) << std::endl;
    return 0;
  }
  const sim::ClassResult& d = p->disaggregated.classes.front();
  const sim::ClassResult& c = p->colocated.classes.front();
  std::printf("%s at %.3f jobs/s, p99 within %.2f s:\n", o.model.c_str(), o.rate, o.slo_p99_s);
  for (std::size_t i = 0; i < p->pools.size(); ++i) {
    std::printf("  %-8s %6d GPUs  utilization %.3f", p->pools[i].stage.c_str(), p->pools[i].gpus,
                p->disaggregated.pools[i].utilization);
    std::printf(p->pools[i].capacity > 1 ? "  batches of %d\n" : "\n", p->pools[i].capacity);
  }
  std::printf("  disaggregated %d GPUs: p50 %.2f s, p99 %.2f s\n", p->gpus, d.latency_s.p50,
              d.latency_s.p99);
  std::printf("  colocated     %d GPUs: p50 %.2f s, p99 %.2f s", p->colocated_gpus, c.latency_s.p50,
              c.latency_s.p99);
  std::printf(p->colocated_batch > 1 ? ", batches of %d\n" : "\n", p->colocated_batch);
  std::printf("  (%d simulations)\n", p->simulations);
  return 0;
}

struct OverlapOptions {
  std::vector<double> link_gbps = {10, 100, 400};
  std::vector<std::int64_t> frames;  // Empty: each profile's own.
  bool json = false;
};

// Every video profile, its latent chunked along its latent frames.
int RunOverlap(const OverlapOptions& o) {
  nlohmann::json rows = nlohmann::json::array();
  if (!o.json) {
    std::printf("%-19s %9s %6s %9s %11s %9s %12s %10s %16s\n", "model", "link Gb/s", "chunks",
                "latent MB", "transfer ms", "decode s", "hidden ms", "transfer %",
                "decode overlap %");
  }
  std::vector<::sluice::ModelProfile> videos;
  for (const ::sluice::ModelProfile& p : ::sluice::ModelProfiles()) {
    if (!p.video || p.latent_shape.size() != 4) {
      continue;
    }
    for (std::int64_t f : o.frames.empty() ? std::vector{::sluice::VideoFrames(p)} : o.frames) {
      Result<::sluice::ModelProfile> at = f == ::sluice::VideoFrames(p)
                                              ? Result<::sluice::ModelProfile>(p)
                                              : ::sluice::AtFrames(p, f);
      if (!at.ok()) {
        std::cerr << "sluice sim overlap: --frames: " << at.status().message() << "\n";
        return 2;
      }
      videos.push_back(std::move(*at));
    }
  }
  for (const ::sluice::ModelProfile& p : videos) {
    for (double gbps : o.link_gbps) {
      Result<sim::OverlapResult> r =
          sim::MeasureOverlap(sim::SimProfile(p), gbps, static_cast<int>(p.latent_shape[1]));
      if (!r.ok()) {
        std::cerr << "sluice sim overlap: " << r.status().message() << "\n";
        return 2;
      }
      if (o.json) {
        rows.push_back({{"model", r->model},
                        {"link_gbps", gbps},
                        {"chunks", r->chunks},
                        {"latent_bytes", r->latent_bytes},
                        {"transfer_s", r->transfer_s},
                        {"decode_s", r->decode_s},
                        {"hidden_s", r->hidden_s},
                        {"transfer_hidden", r->transfer_hidden},
                        {"decode_overlapped", r->decode_overlapped}});
        continue;
      }
      std::printf("%-19s %9.0f %6d %9.2f %11.3f %9.2f %12.3f %10.1f %16.3f\n", r->model.c_str(),
                  gbps, r->chunks, r->latent_bytes / 1e6, r->transfer_s * 1e3, r->decode_s,
                  r->hidden_s * 1e3, 100 * r->transfer_hidden, 100 * r->decode_overlapped);
    }
  }
  if (o.json) {
    std::cout << rows.dump() << std::endl;
  }
  return 0;
}

struct ReportOptions {
  std::string config;
  std::string dir;
};

int RunReport(const ReportOptions& o) {
  Result<sim::ReportConfig> c = sim::ReadReportConfig(o.config);
  if (!c.ok()) {
    std::cerr << "sluice sim report: " << c.status().message() << "\n";
    return 2;
  }
  const std::string gnuplot = FindOnPath("gnuplot");
  if (gnuplot.empty()) {
    std::cerr << "sluice sim report: no gnuplot on PATH (Debian: gnuplot-nox); writing the "
                 "tables and data without PNGs\n";
  }
  Result<sim::ReportOutput> r = sim::WriteReport(*c, o.dir, gnuplot);
  if (!r.ok()) {
    std::cerr << "sluice sim report: " << r.status().message() << "\n";
    return r.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  std::printf("%s/report.md: %zu files, %d simulations in %.1f s\n", o.dir.c_str(), r->files.size(),
              r->simulations, r->wall_s);
  return 0;
}

}  // namespace

void AddSimCommand(CLI::App& app, std::vector<Command>* out) {
  auto po = std::make_shared<PlanOptions>();
  CLI::App* plan = app.add_subcommand(
      "plan", "the fewest GPUs per pool meeting a p99 latency SLO at an arrival rate (simulated)");
  plan->add_option(
          "--model", po->model,
          "a model profile: wan2.1-480p, wan2.1-720p, hunyuan-720p, flux-1024 or qwen-image-1024")
      ->capture_default_str();
  plan->add_option("--rate", po->rate, "arrivals per second (Poisson)")
      ->check(CLI::Range(1e-6, 1e6))
      ->capture_default_str();
  plan->add_option("--slo-p99", po->slo_p99_s, "p99 latency to meet, seconds")
      ->check(CLI::Range(1e-3, 1e7))
      ->capture_default_str();
  plan->add_option("--priority", po->priority, "the jobs' class")
      ->check(CLI::IsMember({"interactive", "standard", "batch"}))
      ->capture_default_str();
  plan->add_option("--hours", po->hours, "simulated span of each trial")
      ->check(CLI::Range(0.001, 100.0))
      ->capture_default_str();
  plan->add_option("--seed", po->seed, "random seed")->capture_default_str();
  plan->add_option("--max-gpus", po->max_gpus, "give up beyond this many GPUs")
      ->check(CLI::Range(1, 10000000))
      ->capture_default_str();
  plan->add_option("--max-utilization", po->max_utilization,
                   "no pool planned busier than this (a trial's span hides a saturated queue)")
      ->check(CLI::Range(0.01, 1.0))
      ->capture_default_str();
  plan->add_option("--gpu-memory-gb", po->gpu_memory_gb,
                   "each GPU's memory: a colocated model that does not fit it pays its decode "
                   "penalty")
      ->check(CLI::Range(1.0, 4096.0))
      ->capture_default_str();
  plan->add_option("--batch-gain", po->batch_gain,
                   "the denoise pool's batching: throughput of batches of 1, 2, ... jobs over one "
                   "alone, comma-separated (e.g. 1,1.82,2.69,2.77); default: the model's published "
                   "curve, if any; 1: no batching")
      ->delimiter(',');
  plan->add_option("--max-batch", po->max_batch, "the largest batch planned")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  plan->add_flag("--json", po->json, "print one JSON object");
  out->push_back({plan, [po] { return RunPlan(*po); }});

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
  cmd->add_option("--gpu-memory-gb", o->gpu_memory_gb,
                  "each GPU's memory: a colocated model that does not fit it pays its decode "
                  "penalty")
      ->check(CLI::Range(1.0, 4096.0))
      ->capture_default_str();
  cmd->add_option("--burst-factor", o->burst_factor,
                  "arrivals come this many times faster during each burst (1: no bursts)")
      ->check(CLI::Range(1.0, 1000.0))
      ->capture_default_str();
  cmd->add_option("--burst-every-s", o->burst_every_s, "a burst starts every this many seconds")
      ->check(CLI::Range(1.0, 1e7))
      ->capture_default_str();
  cmd->add_option("--burst-s", o->burst_s, "each burst lasts this many seconds")
      ->check(CLI::Range(0.001, 1e7))
      ->capture_default_str();
  cmd->add_option("--store-gb", o->store_gb,
                  "the store's memory for payloads between stages, GB (0: unbounded); a stage "
                  "whose output does not fit holds its GPU until it does")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  cmd->add_flag("--colocated", o->colocated,
                "each GPU runs every stage of a job (the same arrivals as disaggregated; video "
                "decodes tiled beside the DiT at 1.3x)");
  cmd->add_option("--trace", o->trace,
                  "arrivals from a CSV of t_s,model,priority lines instead of Poisson ones at "
                  "--load (--hours is then the trace's span); its models must be the workload's")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--json", o->json, "print one JSON object");

  auto ro = std::make_shared<ReportOptions>();
  CLI::App* report = cmd->add_subcommand(
      "report", "run a report config's simulations; write DIR/report.md with tables and plots");
  report->add_option("config", ro->config, "the report's YAML (see docs/benchmarks/)")->required();
  report->add_option("-o,--out", ro->dir, "the directory to write")->required();
  out->push_back({report, [ro] { return RunReport(*ro); }});

  auto oo = std::make_shared<OverlapOptions>();
  CLI::App* overlap = cmd->add_subcommand(
      "overlap",
      "benchmark (b): how much of each video profile's latent transfer and decode overlap when "
      "the latent is chunked along T (simulated, real sizes)");
  overlap->add_option("--link-gbps", oo->link_gbps, "link speeds, Gbit/s")
      ->check(CLI::Range(0.001, 100000.0))
      ->capture_default_str();
  overlap
      ->add_option("--frames", oo->frames,
                   "video lengths to measure each profile at (4k + 1, e.g. 81,121; the latent "
                   "and the decode scale with them); default: each profile's own")
      ->delimiter(',');
  overlap->add_flag("--json", oo->json, "print one JSON array");
  out->push_back({overlap, [oo] { return RunOverlap(*oo); }});
  out->push_back({cmd, [o] { return RunSim(*o); }});
}

}  // namespace sluice::cli
