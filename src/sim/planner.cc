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

  // The trial of `model` on `gpus` per stage; whether it met the SLO.
  Result<bool> Try(const ModelProfile& model, const std::vector<int>& gpus, SimResult* out) {
    const SimConfig c = OneModel(model, gpus, r_.priority, r_.rate_per_s, r_.hours, r_.seed);
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

  // The fewest GPUs per stage of `model` meeting the SLO (see Plan).
  Result<std::vector<int>> Search(const ModelProfile& model, SimResult* at) {
    std::vector<int> g;
    for (const StageProfile& s : model.stages) {
      g.push_back(std::max(1, static_cast<int>(std::ceil(r_.rate_per_s * s.service.mean_s / 0.8))));
    }
    SimResult r;
    while (true) {
      if (Total(g) > r_.max_gpus) {
        return ResourceExhaustedError("plan: the SLO is not met within " +
                                      std::to_string(r_.max_gpus) + " GPUs");
      }
      SLUICE_ASSIGN_OR_RETURN(bool ok, Try(model, g, &r));
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
      int lo =
          std::max(1, static_cast<int>(std::ceil(r_.rate_per_s * model.stages[s].service.mean_s)));
      int hi = g[s];  // Meets it.
      while (lo < hi) {
        std::vector<int> t = g;
        t[s] = (lo + hi) / 2;
        SimResult tr;
        SLUICE_ASSIGN_OR_RETURN(bool ok, Try(model, t, &tr));
        if (ok) {
          hi = t[s];
        } else {
          lo = t[s] + 1;
        }
      }
      g[s] = hi;
    }
    SLUICE_ASSIGN_OR_RETURN(bool ok, Try(model, g, at));
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
  SLUICE_ASSIGN_OR_RETURN(std::vector<int> g, p.Search(request.model, &out.disaggregated));
  for (std::size_t s = 0; s < g.size(); ++s) {
    out.pools.push_back({request.model.name, request.model.stages[s].name, g[s], 1, {}});
  }
  out.gpus = Planner::Total(g);
  const ModelProfile colocated =
      Colocated(request.model, ColocatedDecodePenalty(request.model, request.gpu_memory_gb));
  SLUICE_ASSIGN_OR_RETURN(std::vector<int> c, p.Search(colocated, &out.colocated));
  out.colocated_gpus = c.front();
  out.simulations = p.simulations();
  return out;
}

std::string ToJson(const PlanResult& r) {
  nlohmann::json j;
  for (const PoolSize& p : r.pools) {
    j["pools"].push_back({{"stage", p.stage}, {"gpus", p.gpus}});
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
  j["colocated"] = run(r.colocated);
  j["gpu_ratio"] = r.colocated_gpus > 0 ? static_cast<double>(r.gpus) / r.colocated_gpus : 0.0;
  j["simulations"] = r.simulations;
  return j.dump();
}

}  // namespace sluice::sim
