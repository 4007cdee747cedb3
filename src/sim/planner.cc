#include "sim/planner.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "sim/workloads.h"

namespace sluice::sim {
namespace {

namespace orch = ::sluice::orchestrator;

class Planner {
 public:
  explicit Planner(const PlanRequest& r) : r_(r) {}

  // The trial of `model` on `gpus` per stage, batches of `batch` in its
  // admission pool; whether it met the SLO.
  Result<bool> Try(const ModelProfile& model, const std::vector<int>& gpus, int batch,
                   SimResult* out) {
    const SimConfig c = OneModel(model, gpus, r_.priority, r_.rate_per_s, r_.hours, r_.seed, batch);
    SLUICE_ASSIGN_OR_RETURN(*out, Simulate(c));
    ++simulations_;
    const ClassResult& k = out->classes.front();
    for (const PoolResult& p : out->pools) {
      if (p.utilization > r_.max_utilization) {
        return false;
      }
    }
    return k.unfinished == 0 && k.failed == 0 && k.completed > 0 &&
           (r_.slo_on_ttff ? k.ttff_s.p99 : k.latency_s.p99) <= r_.slo_p99_s;
  }

  // The batch sizes worth a search for `model`: 1, and each size whose
  // gain its admission stage's curve raises, up to max_batch.
  std::vector<int> BatchSizes(const ModelProfile& model) const {
    std::vector<int> sizes = {1};
    const std::size_t a = AdmissionStage(model);
    if (a == model.stages.size()) {
      return sizes;
    }
    const std::vector<double>& gain = model.stages[a].batch_gain;
    for (int b = 2; b <= r_.max_batch && b <= static_cast<int>(gain.size()); ++b) {
      if (BatchGain(gain, b) > BatchGain(gain, sizes.back()) + 1e-9) {
        sizes.push_back(b);
      }
    }
    return sizes;
  }

  // The fewest GPUs per stage of `model` meeting the SLO, and the batch
  // size of its admission pool they take: the fewest over BatchSizes, the
  // smaller batch on a tie. Errors: kResourceExhausted when no size meets
  // it within max_gpus.
  Result<std::pair<std::vector<int>, int>> Best(const ModelProfile& model, SimResult* at) {
    std::pair<std::vector<int>, int> best;
    Status last;
    for (int b : BatchSizes(model)) {
      SimResult r;
      Result<std::vector<int>> g = Search(model, b, &r);
      if (!g.ok()) {
        if (g.status().code() != StatusCode::kResourceExhausted) {
          return g.status();
        }
        last = g.status();
        continue;
      }
      if (best.first.empty() || Total(*g) < Total(best.first)) {
        best = {std::move(*g), b};
        *at = std::move(r);
      }
    }
    if (best.first.empty()) {
      return last;
    }
    return best;
  }

  // The fewest GPUs per stage of `model` meeting the SLO with batches of
  // `batch` in its admission pool (see Plan).
  Result<std::vector<int>> Search(const ModelProfile& model, int batch, SimResult* at) {
    // Each stage's demand in GPUs (rate x service, over the batch's gain).
    std::vector<double> demand;
    for (const StageProfile& s : model.stages) {
      const bool batches = s.kind == orch::StageKind::kAdmission && !s.batch_gain.empty();
      demand.push_back(r_.rate_per_s * s.service.mean_s /
                       (batches ? BatchGain(s.batch_gain, batch) : 1.0));
    }
    std::vector<int> g;
    for (double d : demand) {
      g.push_back(std::max(1, static_cast<int>(std::ceil(d / 0.8))));
    }
    SimResult r;
    while (true) {
      if (Total(g) > r_.max_gpus) {
        return ResourceExhaustedError("plan: the SLO is not met within " +
                                      std::to_string(r_.max_gpus) + " GPUs");
      }
      SLUICE_ASSIGN_OR_RETURN(bool ok, Try(model, g, batch, &r));
      if (ok) {
        break;
      }
      // Grow the busiest pool by a tenth.
      std::size_t busiest = 0;
      for (std::size_t s = 1; s < g.size(); ++s) {
        if (r.pools[s].utilization > r.pools[busiest].utilization) {
          busiest = s;
        }
      }
      g[busiest] += std::max(1, g[busiest] / 10);
    }
    // Trim each pool to the fewest GPUs that still meet it.
    for (std::size_t s = 0; s < g.size(); ++s) {
      int lo = std::max(1, static_cast<int>(std::ceil(demand[s])));
      int hi = g[s];  // Meets it.
      while (lo < hi) {
        std::vector<int> t = g;
        t[s] = (lo + hi) / 2;
        SimResult tr;
        SLUICE_ASSIGN_OR_RETURN(bool ok, Try(model, t, batch, &tr));
        if (ok) {
          hi = t[s];
        } else {
          lo = t[s] + 1;
        }
      }
      g[s] = hi;
    }
    SLUICE_ASSIGN_OR_RETURN(bool ok, Try(model, g, batch, at));
    if (!ok) {
      return InternalError("plan: the trimmed plan no longer meets the SLO");
    }
    return g;
  }

  int simulations() const { return simulations_; }
  static int Total(const std::vector<int>& g) {
    int t = 0;
    for (int x : g) {
      t += x;
    }
    return t;
  }

 private:
  const PlanRequest& r_;
  int simulations_ = 0;
};

}  // namespace

Result<PlanResult> Plan(const PlanRequest& request) {
  if (!(request.rate_per_s > 0) || !(request.slo_p99_s > 0) || !(request.hours > 0) ||
      !(request.gpu_memory_gb > 0) || request.max_gpus < 1 || request.model.stages.empty()) {
    return InvalidArgumentError("plan: rate, SLO, hours and GPU memory must be > 0, max_gpus >= 1");
  }
  if (!(request.max_utilization > 0 && request.max_utilization <= 1)) {
    return InvalidArgumentError("plan: the utilization cap must be in (0, 1]");
  }
  if (request.max_batch < 1 || request.max_batch > 1024) {
    return InvalidArgumentError("plan: max_batch must be in [1, 1024]");
  }
  double service = 0;  // Until the result, or the first frame.
  for (const StageProfile& s : request.model.stages) {
    const bool last = &s == &request.model.stages.back();
    service += s.service.mean_s * (last && request.slo_on_ttff ? s.first_output_fraction : 1.0);
  }
  if (request.slo_p99_s <= service) {
    return InvalidArgumentError("plan: a p99 of " + std::to_string(request.slo_p99_s) +
                                " s is below " + request.model.name + "'s own service time (" +
                                std::to_string(service) + " s): no pool size meets it");
  }
  Planner p(request);
  PlanResult out;
  SLUICE_ASSIGN_OR_RETURN(auto plan, p.Best(request.model, &out.disaggregated));
  const auto& [g, batch] = plan;
  for (std::size_t s = 0; s < g.size(); ++s) {
    const bool admission = s == AdmissionStage(request.model);
    out.pools.push_back(
        {request.model.name, request.model.stages[s].name, g[s], admission ? batch : 1, {}});
  }
  out.gpus = Planner::Total(g);
  const ModelProfile colocated =
      Colocated(request.model, ColocatedDecodePenalty(request.model, request.gpu_memory_gb));
  SLUICE_ASSIGN_OR_RETURN(auto c, p.Best(colocated, &out.colocated));
  out.colocated_gpus = c.first.front();
  out.colocated_batch = c.second;
  out.simulations = p.simulations();
  return out;
}

std::string ToJson(const PlanResult& r) {
  nlohmann::json j;
  for (const PoolSize& p : r.pools) {
    j["pools"].push_back({{"stage", p.stage}, {"gpus", p.gpus}, {"batch", p.capacity}});
  }
  auto run = [](const SimResult& s) {
    const ClassResult& k = s.classes.front();
    nlohmann::json pools = nlohmann::json::array();
    for (const PoolResult& p : s.pools) {
      pools.push_back({{"stage", p.stage}, {"utilization", p.utilization}});
    }
    return nlohmann::json{{"p50_s", k.latency_s.p50},
                          {"p99_s", k.latency_s.p99},
                          {"ttff_p99_s", k.ttff_s.p99},
                          {"completed", k.completed},
                          {"pools", pools}};
  };
  j["model"] = r.pools.empty() ? "" : r.pools.front().model;
  j["gpus"] = r.gpus;
  j["disaggregated"] = run(r.disaggregated);
  j["colocated_gpus"] = r.colocated_gpus;
  j["colocated_batch"] = r.colocated_batch;
  j["colocated"] = run(r.colocated);
  j["gpu_ratio"] = r.colocated_gpus > 0 ? static_cast<double>(r.gpus) / r.colocated_gpus : 0.0;
  j["simulations"] = r.simulations;
  return j.dump();
}

}  // namespace sluice::sim
