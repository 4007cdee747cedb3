#include "bench/sharing_bench.h"

#include <nlohmann/json.hpp>

namespace sluice::bench {
namespace {

// The SLO's TTFF figure of a run: the interactive jobs' where the
// workload has classes.
double TtffP99(const E2eBenchResult& r) {
  return r.options.workload == "mixed" ? r.interactive_p99_ttff_s : r.p99_ttff_s;
}

bool Meets(const SharingBenchOptions& o, const E2eBenchResult& r) {
  return r.failed == 0 && r.rejected == 0 && r.succeeded > 0 && TtffP99(r) <= o.slo_ttff_p99_s &&
         (o.slo_latency_p99_s <= 0 || r.p99_latency_s <= o.slo_latency_p99_s);
}

// One point: run and/or replay `run`.
Result<SharingPoint> RunPoint(const SharingBenchOptions& o, const E2eBenchOptions& run) {
  SharingPoint p;
  p.mode = run.mode;
  p.decode_workers = run.mode == "colocated" ? 0 : run.decode_workers;
  p.denoise_workers =
      run.mode == "colocated" ? run.workers : run.workers - run.encode_workers - run.decode_workers;
  if (o.simulate != "measured") {
    SLUICE_ASSIGN_OR_RETURN(E2eBenchResult s, SimulateE2e(run, o.sim));
    p.simulated_meets = Meets(o, s);
    p.simulated = std::move(s);
  }
  if (o.simulate != "simulated") {
    SLUICE_ASSIGN_OR_RETURN(E2eBenchResult m, RunE2eBench(run));
    p.measured_meets = Meets(o, m);
    p.measured = std::move(m);
  }
  return p;
}

nlohmann::json Figures(const E2eBenchResult& r, bool meets) {
  return {{"succeeded", r.succeeded},         {"failed", r.failed + r.rejected},
          {"throughput", r.throughput},       {"p50_latency_s", r.p50_latency_s},
          {"p99_latency_s", r.p99_latency_s}, {"p50_ttff_s", r.p50_ttff_s},
          {"p99_ttff_s", r.p99_ttff_s},       {"slo_ttff_p99_s", TtffP99(r)},
          {"utilization", r.utilization},     {"meets_slo", meets}};
}

}  // namespace

Status ValidateSharingOptions(const SharingBenchOptions& o) {
  if (o.simulate != "measured" && o.simulate != "simulated" && o.simulate != "both") {
    return InvalidArgumentError("--simulate: measured, simulated or both");
  }
  if (o.run.workload == "reference") {
    return InvalidArgumentError("--workload reference: the sweep needs profile stages");
  }
  if (o.decode_workers.empty() || o.decode_workers.size() > 16) {
    return InvalidArgumentError("--decode: 1 to 16 decode worker counts");
  }
  for (std::size_t i = 0; i < o.decode_workers.size(); ++i) {
    if (i > 0 && o.decode_workers[i] <= o.decode_workers[i - 1]) {
      return InvalidArgumentError("--decode: worker counts must ascend");
    }
    E2eBenchOptions run = o.run;
    run.mode = "disagg";
    run.light_stages = "pools";
    run.decode_workers = o.decode_workers[i];
    SLUICE_RETURN_IF_ERROR(ValidateE2eOptions(run));
  }
  if (!(o.slo_ttff_p99_s > 0 && o.slo_ttff_p99_s < 1e6) ||
      !(o.slo_latency_p99_s >= 0 && o.slo_latency_p99_s < 1e6)) {
    return InvalidArgumentError(
        "--slo-ttff-p99 must be in (0, 1e6) s and --slo-latency-p99 in [0, 1e6) s");
  }
  return Status::Ok();
}

Result<SharingBenchResult> RunSharingBench(const SharingBenchOptions& o) {
  SLUICE_RETURN_IF_ERROR(ValidateSharingOptions(o));
  SharingBenchResult out;
  out.options = o;
  for (int m : o.decode_workers) {
    E2eBenchOptions run = o.run;
    run.mode = "disagg";
    run.light_stages = "pools";
    run.decode_workers = m;
    SLUICE_ASSIGN_OR_RETURN(SharingPoint p, RunPoint(o, run));
    if (p.measured_meets && out.fewest_decode_measured == 0) {
      out.fewest_decode_measured = m;
    }
    if (p.simulated_meets && out.fewest_decode_simulated == 0) {
      out.fewest_decode_simulated = m;
    }
    out.points.push_back(std::move(p));
  }
  E2eBenchOptions colocated = o.run;
  colocated.mode = "colocated";
  SLUICE_ASSIGN_OR_RETURN(SharingPoint p, RunPoint(o, colocated));
  out.points.push_back(std::move(p));
  return out;
}

std::string ToJson(const SharingBenchResult& r) {
  const E2eBenchOptions& run = r.options.run;
  nlohmann::json j = {{"workload", run.workload},
                      {"workers", run.workers},
                      {"encode_workers", run.encode_workers},
                      {"rate", run.rate},
                      {"duration_s", run.duration_s},
                      {"warmup_s", run.warmup_s},
                      {"time_factor", run.time_factor},
                      {"slo_ttff_p99_s", r.options.slo_ttff_p99_s},
                      {"slo_latency_p99_s", r.options.slo_latency_p99_s},
                      {"fewest_decode_measured", r.fewest_decode_measured},
                      {"fewest_decode_simulated", r.fewest_decode_simulated}};
  nlohmann::json points = nlohmann::json::array();
  for (const SharingPoint& p : r.points) {
    nlohmann::json pj = {{"mode", p.mode},
                         {"denoise_workers", p.denoise_workers},
                         {"decode_workers", p.decode_workers}};
    if (p.decode_workers > 0) {
      pj["n_to_m"] = static_cast<double>(p.denoise_workers) / p.decode_workers;
    }
    if (p.measured) {
      pj["measured"] = Figures(*p.measured, p.measured_meets);
    }
    if (p.simulated) {
      pj["simulated"] = Figures(*p.simulated, p.simulated_meets);
    }
    points.push_back(std::move(pj));
  }
  j["points"] = std::move(points);
  return j.dump();
}

}  // namespace sluice::bench
