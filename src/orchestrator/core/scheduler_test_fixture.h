// The scheduler tests' fixture (scheduler_test.cc, scheduler_affinity_test.cc):
// model "m" declared, helpers for workers and jobs, and what was
// dispatched. SchedulerTest is instantiated once, in scheduler_test.cc.
#ifndef SLUICE_ORCHESTRATOR_CORE_SCHEDULER_TEST_FIXTURE_H_
#define SLUICE_ORCHESTRATOR_CORE_SCHEDULER_TEST_FIXTURE_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

#include "orchestrator/core/scheduler.h"

namespace sluice::orchestrator::scheduler_testing {

using namespace std::chrono_literals;
using Kind = Action::Kind;

inline constexpr const char* kModel = "m";

// A worker of `stage` for model "m".
inline WorkerSpec W(std::string stage, int capacity, std::vector<std::string> labels = {},
                    std::vector<std::string> models = {kModel}) {
  return WorkerSpec{std::move(models), std::move(stage), capacity, std::move(labels)};
}

// `s` with model "m" (encode, denoise (admission), decode) declared.
inline Scheduler& Declared(Scheduler& s) {
  EXPECT_TRUE(s.DeclareModel({kModel, StandardPipeline()}).ok());
  return s;
}

// Model "m", and with `two_models` a second model "other" served at once:
// idle workers 1001..1003 (one per stage, two slots each) that must never
// take m's work, nor count as m's downstream slots.
class SchedulerFixture : public ::testing::Test {
 protected:
  explicit SchedulerFixture(SchedulerOptions o = {}, bool two_models = false) : s_(o) {
    Declared(s_);
    if (two_models) {
      EXPECT_TRUE(s_.DeclareModel({"other", StandardPipeline()}).ok());
      WorkerId id = 1001;
      for (const char* stage : {"encode", "denoise", "decode"}) {
        EXPECT_TRUE(s_.WorkerUp(id++, W(stage, 2, {}, {"other"}), now_).ok());
      }
    }
  }

  JobSpec Job(JobId id, PriorityClass p = PriorityClass::kStandard,
              std::vector<std::string> pipeline = {"encode"}) {
    JobSpec j;
    j.id = id;
    j.model = kModel;
    j.priority = p;
    j.pipeline = std::move(pipeline);
    return j;
  }
  // Dispatch actions since the last call, as (job, worker) pairs.
  std::vector<std::pair<JobId, WorkerId>> Dispatched() {
    std::vector<std::pair<JobId, WorkerId>> out;
    for (const Action& a : s_.TakeActions()) {
      if (a.kind == Kind::kDispatch) {
        out.emplace_back(a.job, a.worker);
      }
    }
    return out;
  }
  std::vector<JobId> DispatchedJobs() {
    std::vector<JobId> out;
    for (auto [j, w] : Dispatched()) {
      out.push_back(j);
    }
    return out;
  }

  // Queued at `stage` of `model`.
  std::size_t Queued(const std::string& stage, const std::string& model = kModel) {
    for (const PoolStats& p : s_.Stats().pools) {
      if (p.model == model && p.stage == stage) {
        return p.queued;
      }
    }
    ADD_FAILURE() << "no pool " << model << "/" << stage;
    return 0;
  }

  TimePoint now_ = TimePoint{} + 1h;
  Scheduler s_;
};

// Every SchedulerTest runs with model "m" alone and with a second model
// served beside it.
class SchedulerTest : public SchedulerFixture, public ::testing::WithParamInterface<bool> {
 protected:
  SchedulerTest() : SchedulerFixture({}, GetParam()) {}
};

}  // namespace sluice::orchestrator::scheduler_testing

#endif  // SLUICE_ORCHESTRATOR_CORE_SCHEDULER_TEST_FIXTURE_H_
