#include "sim/planner.h"

#include <cmath>

#include <gtest/gtest.h>

#include "sim/workloads.h"

namespace sluice::sim {
namespace {

PlanRequest Images(double rate, double slo) {
  PlanRequest r;
  r.model = FluxImageProfile();
  r.rate_per_s = rate;
  r.slo_p99_s = slo;
  r.priority = orchestrator::PriorityClass::kInteractive;
  r.hours = 0.25;
  return r;
}

TEST(PlannerTest, APlanMeetsItsSloWithPoolsNoLargerThanNeeded) {
  Result<PlanResult> p = Plan(Images(10, 6));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->pools.size(), 3u);
  const ClassResult& k = p->disaggregated.classes.front();
  EXPECT_LE(k.latency_s.p99, 6);
  EXPECT_EQ(k.unfinished, 0u);
  // At least the demand (rate x service) in each pool; the denoise pool
  // (3.9 s a job at 10/s) needs more than 39.
  EXPECT_GE(p->pools[1].gpus, 39);
  for (const PoolResult& pool : p->disaggregated.pools) {
    EXPECT_LT(pool.utilization, 1.0) << pool.stage;
  }
  // One GPU fewer in the denoise pool misses it (the search trimmed it).
  SimConfig c;
  c.models = {FluxImageProfile()};
  c.pools = p->pools;
  c.pools[1].gpus -= 1;
  c.arrivals = {{"flux-1024", orchestrator::PriorityClass::kInteractive, 10}};
  c.duration_s = 0.25 * 3600;
  c.admission_overcommit = std::ceil(static_cast<double>(c.pools[1].gpus) / c.pools[2].gpus);
  Result<SimResult> fewer = Simulate(c);
  ASSERT_TRUE(fewer.ok());
  EXPECT_GT(fewer->classes.front().latency_s.p99, 6);
  EXPECT_GT(p->colocated_gpus, 0);
  EXPECT_LE(p->colocated.classes.front().latency_s.p99, 6);
}

TEST(PlannerTest, ATighterSloNeedsAtLeastAsManyGpus) {
  Result<PlanResult> loose = Plan(Images(10, 10));
  Result<PlanResult> tight = Plan(Images(10, 5));
  ASSERT_TRUE(loose.ok() && tight.ok());
  EXPECT_GE(tight->gpus, loose->gpus);
}

TEST(PlannerTest, AnSloBelowTheServiceTimeIsRefused) {
  Status s = Plan(Images(10, 3)).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("service time"), std::string_view::npos) << s.ToString();
  PlanRequest few = Images(10, 6);
  few.max_gpus = 20;
  EXPECT_EQ(Plan(few).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(BuiltinModel("sdxl").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice::sim
