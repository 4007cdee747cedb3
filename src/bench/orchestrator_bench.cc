#include "bench/orchestrator_bench.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <vector>

#include "bench/bench_util.h"
#include "orchestrator/core/scheduler.h"

namespace sluice::bench {

namespace {

Result<OrchestratorBenchResult> RunOnce(const OrchestratorBenchOptions& o) {
  using namespace orchestrator;
  using BenchClock = std::chrono::steady_clock;
  SchedulerOptions so;
  so.max_queued_jobs = o.jobs + 1;
  Scheduler s(so);
  const TimePoint now{};
  OrchestratorBenchResult r;
  r.options = o;
  std::vector<double> event_us, decision_us;
  event_us.reserve(o.jobs * 4);
  decision_us.reserve(o.jobs * 4);
  double total = 0;
  std::vector<Action> pending;
  // Times one event; records it, and whether it decided anything.
  auto timed = [&](auto&& event) {
    const auto t0 = BenchClock::now();
    Status st = event();
    std::vector<Action> acts = s.TakeActions();
    const double us = std::chrono::duration<double, std::micro>(BenchClock::now() - t0).count();
    total += us;
    ++r.events;
    event_us.push_back(us);
    std::size_t dispatches = 0;
    for (Action& a : acts) {
      if (a.kind == Action::Kind::kDispatch) {
        ++dispatches;
        pending.push_back(std::move(a));
      }
    }
    if (dispatches > 0) {
      decision_us.push_back(us / static_cast<double>(dispatches));
    }
    r.decisions += dispatches;
    return st;
  };
  const std::vector<StageDecl> pipeline = StandardPipeline();
  SLUICE_RETURN_IF_ERROR(s.DeclareModel({"bench", pipeline}));
  for (int w = 0; w < o.workers; ++w) {
    const std::string& stage = pipeline[static_cast<std::size_t>(w) % pipeline.size()].name;
    SLUICE_RETURN_IF_ERROR(timed([&] {
      return s.WorkerUp(w + 1, WorkerSpec{{"bench"}, stage, 4, {}}, now);
    }));
  }
  const PriorityClass classes[] = {PriorityClass::kInteractive, PriorityClass::kStandard,
                                   PriorityClass::kBatch};
  for (std::uint64_t j = 1; j <= o.jobs; ++j) {
    JobSpec spec;
    spec.id = j;
    spec.model = "bench";
    spec.priority = classes[j % 3];
    SLUICE_RETURN_IF_ERROR(timed([&] { return s.Submit(spec, now); }));
    if (o.backlog > 0 && j % 64 == 0) {
      std::uint64_t queued = 0;
      for (const PoolStats& p : s.PoolsNow()) {
        queued += p.queued;
      }
      r.max_queued = std::max(r.max_queued, queued);
    }
    // Workers finish what they were given, keeping the system busy (and,
    // with a backlog, the jobs in it at about that many).
    while (!pending.empty() && (pending.size() > static_cast<std::size_t>(o.workers) * 2 ||
                                (o.backlog > 0 && s.JobCount() > o.backlog))) {
      Action a = pending.back();
      pending.pop_back();
      SLUICE_RETURN_IF_ERROR(timed([&] { return s.StageDone(a.job, a.worker, now); }));
    }
  }
  while (!pending.empty()) {
    Action a = pending.back();
    pending.pop_back();
    SLUICE_RETURN_IF_ERROR(timed([&] { return s.StageDone(a.job, a.worker, now); }));
  }
  if (s.Stats().jobs != 0) {
    return InternalError("benchmark ended with " + std::to_string(s.Stats().jobs) +
                         " unfinished jobs");
  }
  r.seconds = total / 1e6;
  r.decisions_per_s = static_cast<double>(r.decisions) / r.seconds;
  r.p50_event_us = Percentile(event_us, 0.5);
  r.p99_decision_us = Percentile(decision_us, 0.99);
  return r;
}

}  // namespace

Result<OrchestratorBenchResult> RunOrchestratorBench(const OrchestratorBenchOptions& o) {
  if (o.jobs < 1 || o.jobs > 10'000'000) {
    return InvalidArgumentError("--jobs must be in 1..10000000");
  }
  if (o.workers < 3 || o.workers > 100'000) {
    return InvalidArgumentError("--workers must be in 3..100000 (at least one per stage)");
  }
  if (o.backlog > 1'000'000) {
    return InvalidArgumentError("--backlog must be in 0..1000000");
  }
  SLUICE_ASSIGN_OR_RETURN(OrchestratorBenchResult r, RunOnce(o));
  if (o.backlog > 0) {
    OrchestratorBenchOptions base = o;
    base.backlog = 0;
    SLUICE_ASSIGN_OR_RETURN(OrchestratorBenchResult b, RunOnce(base));
    r.baseline_decisions_per_s = b.decisions_per_s;
  }
  return r;
}

std::string ToJson(const OrchestratorBenchResult& r) {
  nlohmann::json j;
  j["jobs"] = r.options.jobs;
  j["workers"] = r.options.workers;
  j["decisions"] = r.decisions;
  j["events"] = r.events;
  j["seconds_in_scheduler"] = r.seconds;
  j["decisions_per_s"] = r.decisions_per_s;
  j["p50_event_us"] = r.p50_event_us;
  j["p99_decision_us"] = r.p99_decision_us;
  if (r.options.backlog > 0) {
    j["backlog"] = r.options.backlog;
    j["max_queued"] = r.max_queued;
    j["baseline_decisions_per_s"] = r.baseline_decisions_per_s;
    j["decisions_per_s_vs_baseline"] = r.decisions_per_s / r.baseline_decisions_per_s;
  }
  return j.dump();
}

}  // namespace sluice::bench
