#include "bench/e2e_sim.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "sluice/runtime/model_profiles.h"

#include "bench/bench_util.h"
#include "sim/workloads.h"

namespace sluice::bench {
namespace {

namespace orch = ::sluice::orchestrator;

sim::PoolSize Pool(const std::vector<std::string>& models, const std::string& stage, int gpus,
                   int capacity) {
  return {models.front(), stage, gpus, capacity,
          std::vector<std::string>(models.begin() + 1, models.end())};
}

}  // namespace

Result<sim::SimConfig> E2eSimConfig(const E2eBenchOptions& o, const E2eSimOptions& s) {
  SLUICE_RETURN_IF_ERROR(ValidateE2eOptions(o));
  if (o.workload == "reference") {
    return InvalidArgumentError("--workload reference: no profile to simulate (profile workloads)");
  }
  for (double cost : {s.dispatch_s, s.step_s, s.result_s, s.first_output_s}) {
    if (!(cost >= 0 && cost < 10)) {
      return InvalidArgumentError(
          "the simulated costs (dispatch, step, result, first output) must be in [0, 10) s");
    }
  }
  if (!(s.link_gbps > 0)) {
    return InvalidArgumentError("link_gbps must be > 0");
  }
  sim::SimConfig c;
  c.duration_s = o.warmup_s + o.duration_s;
  c.link_gbps = s.link_gbps;
  c.link_latency_us = s.dispatch_s * 1e6;
  c.keep_samples = true;
  c.admission_overcommit = 0;  // The embedded orchestrator's default.
  std::vector<std::string> models;
  for (const PlannedJob& p : PlanE2eArrivals(o)) {
    const E2eJobKind k = E2eJobModel(o.workload, p.index);
    c.trace.push_back({p.at_s, k.model,
                       orch::ParsePriority(k.priority).value_or(orch::PriorityClass::kStandard),
                       !p.warmup});
    if (std::find(models.begin(), models.end(), k.model) == models.end()) {
      models.push_back(k.model);
    }
  }
  for (const std::string& name : models) {
    SLUICE_ASSIGN_OR_RETURN(::sluice::ModelProfile p, ::sluice::FindModelProfile(name));
    sim::ModelProfile m = sim::SimProfile(p, o.time_factor, /*exact=*/true);
    sim::StageProfile& denoise = m.stages[1];
    denoise.service.mean_s += denoise.steps * s.step_s;
    sim::StageProfile& last = m.stages.back();
    if (o.mode == "disagg" && o.latent_chunks > 1 && p.video && p.latent_shape.size() == 4) {
      // The profile decode works through the latent's chunks as they land,
      // its first output after the first (ceil(T / k) frames of T).
      const std::int64_t frames = p.latent_shape[1];
      const std::int64_t k = std::min<std::int64_t>(o.latent_chunks, frames);
      last.input_chunks = static_cast<int>(k);
      last.first_output_fraction =
          static_cast<double>((frames + k - 1) / k) / static_cast<double>(frames);
    }
    // Measured (the events of one job: README): a decode's first output
    // reaches the orchestrator about half a millisecond after it exists (a
    // heartbeat sent at once), its result some 4 ms after the decode.
    const double first = last.service.mean_s * last.first_output_fraction + s.first_output_s;
    last.service.mean_s += s.result_s;
    last.first_output_fraction = first / last.service.mean_s;
    // The profile stages' colocated handler spends the same decode time.
    c.models.push_back(o.mode == "colocated" ? sim::Colocated(m, 1.0) : m);
  }
  const int w = o.workers;
  if (o.mode == "colocated") {
    c.pools = {Pool(models, "denoise", w, 1)};
  } else if (o.light_stages == "shared") {
    // Every worker registers encode, denoise and decode; decode takes
    // 4 x denoise / decoders assignments at once.
    c.pools = {Pool(models, "encode", w, 1), Pool(models, "denoise", w, 1),
               Pool(models, "decode", w, 4)};
  } else if (o.light_stages == "pools") {
    // One stage at a time on every worker; denoise overcommits the decode
    // slots as the embedded deployment sets it (decode_slots 1).
    const int denoise = w - o.encode_workers - o.decode_workers;
    c.pools = {Pool(models, "encode", o.encode_workers, 1), Pool(models, "denoise", denoise, 1),
               Pool(models, "decode", o.decode_workers, 1)};
    c.admission_overcommit = std::ceil(static_cast<double>(denoise) / o.decode_workers);
  } else {
    c.pools = {Pool(models, "encode", 1, 1), Pool(models, "denoise", w - 1, 1),
               Pool(models, "decode", 1, std::max(1, 4 * (w - 1)))};
  }
  return c;
}

Result<E2eBenchResult> SimulateE2e(const E2eBenchOptions& o, const E2eSimOptions& s) {
  SLUICE_ASSIGN_OR_RETURN(sim::SimConfig c, E2eSimConfig(o, s));
  SLUICE_ASSIGN_OR_RETURN(sim::SimResult r, sim::Simulate(c));
  E2eBenchResult out;
  out.options = o;
  std::vector<double> latency, ttff, interactive_ttff;
  double last = 0;
  for (const sim::ClassResult& k : r.classes) {
    out.submitted += static_cast<int>(k.submitted);
    out.succeeded += static_cast<int>(k.completed);
    out.failed += static_cast<int>(k.failed + k.unfinished);
    out.rejected += static_cast<int>(k.refused);
    latency.insert(latency.end(), k.latency_samples.begin(), k.latency_samples.end());
    ttff.insert(ttff.end(), k.ttff_samples.begin(), k.ttff_samples.end());
    if (k.priority == orch::PriorityClass::kInteractive) {
      interactive_ttff.insert(interactive_ttff.end(), k.ttff_samples.begin(), k.ttff_samples.end());
    }
    last = std::max(last, k.last_done_s);
  }
  out.seconds = std::max(0.0, last - o.warmup_s);
  out.throughput = out.seconds > 0 ? out.succeeded / out.seconds : 0;
  out.p50_latency_s = Percentile(latency, 0.5);
  out.p99_latency_s = Percentile(latency, 0.99);
  out.p50_ttff_s = Percentile(ttff, 0.5);
  out.p99_ttff_s = Percentile(ttff, 0.99);
  out.interactive_p99_ttff_s = Percentile(interactive_ttff, 0.99);
  out.interactive_jobs = static_cast<int>(interactive_ttff.size());
  for (const sim::PoolResult& p : r.pools) {
    out.utilization[o.mode == "colocated" ? "colocated" : p.stage] = p.utilization;
  }
  return out;
}

std::string CalibrationJson(const E2eBenchResult& measured, const E2eBenchResult& simulated) {
  auto ratio = [](double sim, double real) { return real > 0 ? sim / real : 0.0; };
  nlohmann::json j;
  j["measured"] = nlohmann::json::parse(ToJson(measured));
  j["simulated"] = nlohmann::json::parse(ToJson(simulated));
  j["sim_over_measured"] = {{"p50_latency", ratio(simulated.p50_latency_s, measured.p50_latency_s)},
                            {"p99_latency", ratio(simulated.p99_latency_s, measured.p99_latency_s)},
                            {"p50_ttff", ratio(simulated.p50_ttff_s, measured.p50_ttff_s)},
                            {"p99_ttff", ratio(simulated.p99_ttff_s, measured.p99_ttff_s)},
                            {"throughput", ratio(simulated.throughput, measured.throughput)}};
  return j.dump();
}

}  // namespace sluice::bench
