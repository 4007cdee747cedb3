// The simulator's batching stages (StageProfile::batch_gain): members of
// a worker's batch move at BatchGain(n) / n of their speed alone, joining
// and leaving change the others' ends, and a saturated pool serves at the
// curve's gain.
#include <gtest/gtest.h>

#include "sim/simulator.h"

namespace sluice::sim {
namespace {

namespace orch = ::sluice::orchestrator;

// One model of one admission stage of `steps` steps taking exactly 1 s
// alone, on one GPU whose batch holds `capacity` jobs.
SimConfig OneStage(std::vector<double> gain, int capacity) {
  SimConfig c;
  ModelProfile m;
  m.name = "m";
  StageProfile s;
  s.name = "denoise";
  s.kind = orch::StageKind::kAdmission;
  s.service = {1.0, 0};
  s.steps = 10;
  s.batch_gain = std::move(gain);
  m.stages = {s};
  c.models = {m};
  c.pools = {{"m", "denoise", 1, capacity, {}}};
  c.link_latency_us = 0;
  c.duration_s = 100;
  c.keep_samples = true;
  return c;
}

std::vector<double> Latencies(const SimConfig& c) {
  Result<SimResult> r = Simulate(c);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? r->classes.front().latency_samples : std::vector<double>{};
}

TEST(SimulatorBatchTest, MembersOfABatchMoveAtItsGainOverItsSize) {
  // Two jobs at once on gain 1.8: each at 0.9 of its speed, both done at 1/0.9 s.
  SimConfig c = OneStage({1.0, 1.8}, 2);
  c.trace = {{0, "m"}, {0, "m"}};
  std::vector<double> l = Latencies(c);
  ASSERT_EQ(l.size(), 2u);
  EXPECT_NEAR(l[0], 1 / 0.9, 1e-9);
  EXPECT_NEAR(l[1], 1 / 0.9, 1e-9);

  // The second joins at 0.5 s: the first has 0.5 s of work left, done at
  // 0.5 + 0.5 / 0.9; the second has done 0.5 s by then and runs the rest
  // alone at full speed.
  c.trace = {{0, "m"}, {0.5, "m"}};
  l = Latencies(c);
  ASSERT_EQ(l.size(), 2u);
  EXPECT_NEAR(l[0], 0.5 + 0.5 / 0.9, 1e-9);
  EXPECT_NEAR(l[1], 0.5 + 0.5 / 0.9, 1e-9);

  // Without a curve the two slots run side by side, each at full speed.
  c = OneStage({}, 2);
  c.trace = {{0, "m"}, {0.5, "m"}};
  l = Latencies(c);
  ASSERT_EQ(l.size(), 2u);
  EXPECT_NEAR(l[0], 1.0, 1e-9);
  EXPECT_NEAR(l[1], 1.0, 1e-9);

  // Past its last entry the gain stays there: three at once on {1, 1.8}
  // each move at 0.6.
  c = OneStage({1.0, 1.8}, 3);
  c.trace = {{0, "m"}, {0, "m"}, {0, "m"}};
  l = Latencies(c);
  ASSERT_EQ(l.size(), 3u);
  EXPECT_NEAR(l[2], 1 / 0.6, 1e-9);
}

TEST(SimulatorBatchTest, ASaturatedPoolServesAtTheCurvesGain) {
  // Arrivals at 3/s on one GPU of 1 s jobs, nothing drained after 300 s:
  // what finished is the pool's service rate.
  auto served = [](std::vector<double> gain, int capacity) {
    SimConfig c = OneStage(std::move(gain), capacity);
    c.trace.clear();
    c.arrivals = {{"m", orch::PriorityClass::kStandard, 3.0}};
    c.duration_s = 300;
    c.drain_limit_s = 0;
    Result<SimResult> r = Simulate(c);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_GT(r->pools.front().utilization, 0.97);
    return r->classes.front().throughput_per_s;
  };
  const double alone = served({}, 1);
  const double batched = served({1.0, 1.8, 2.4, 2.6}, 4);
  const double flat = served({1.0, 1.0, 1.0, 1.0}, 4);
  EXPECT_NEAR(alone, 1.0, 0.02);
  EXPECT_NEAR(batched / alone, 2.6, 0.06);
  EXPECT_NEAR(flat / alone, 1.0, 0.02);
}

TEST(SimulatorBatchTest, AFailedGpusBatchRunsOnElsewhereAndEveryJobFinishes) {
  // Jobs of 10 steps in batches of 4 on 3 GPUs failing every ~2 min: every
  // job still finishes (its members resume from the step each reached).
  SimConfig c = OneStage({1.0, 1.9, 2.7, 3.4}, 4);
  c.pools.front().gpus = 3;
  c.trace.clear();
  c.arrivals = {{"m", orch::PriorityClass::kStandard, 4.0}};
  c.duration_s = 600;
  c.mtbf_s = 120;
  c.repair_s = 10;
  Result<SimResult> r = Simulate(c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->worker_failures, 5u);
  const ClassResult& k = r->classes.front();
  EXPECT_GT(k.submitted, 2000u);
  EXPECT_EQ(k.completed, k.submitted);
  EXPECT_EQ(k.failed + k.unfinished, 0u);
}

TEST(SimulatorBatchTest, ABatchingLastStageDatesItsFirstOutputByItsWork) {
  // A last stage whose first output comes at half its work: two jobs at
  // once reach it at 0.5 / 0.9 s.
  SimConfig c = OneStage({1.0, 1.8}, 2);
  c.models[0].stages[0].first_output_fraction = 0.5;
  c.trace = {{0, "m"}, {0, "m"}};
  Result<SimResult> r = Simulate(c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->classes.front().ttff_samples.size(), 2u);
  EXPECT_NEAR(r->classes.front().ttff_samples[0], 0.5 / 0.9, 1e-9);
  EXPECT_NEAR(r->classes.front().latency_samples[1], 1 / 0.9, 1e-9);
}

TEST(SimulatorBatchTest, BadCurvesAreRefusedByName) {
  for (std::vector<double> bad : std::vector<std::vector<double>>{{1.5, 2}, {1, 0}, {1, -1}}) {
    SimConfig c = OneStage(bad, 2);
    c.trace = {{0, "m"}};
    Status s = Simulate(c).status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("batch_gain"), std::string_view::npos) << s.ToString();
  }
  SimConfig c = OneStage({1, 2}, 2);
  c.trace = {{0, "m"}};
  c.models[0].stages[0].kind = orch::StageKind::kWork;
  EXPECT_NE(Simulate(c).status().message().find("batch_gain"), std::string_view::npos);
  // A batching pool serving two models is refused.
  c = OneStage({1, 2}, 2);
  c.trace = {{0, "m"}};
  c.models.push_back(c.models[0]);
  c.models[1].name = "m2";
  c.pools[0].more_models = {"m2"};
  Status s = Simulate(c).status();
  EXPECT_NE(s.message().find("serves one model"), std::string_view::npos) << s.ToString();
}

TEST(SimulatorBatchTest, BatchGainIsTheCurvesEntryOrItsLastOrTheSlotCount) {
  EXPECT_EQ(BatchGain({1, 1.5, 1.8}, 2), 1.5);
  EXPECT_EQ(BatchGain({1, 1.5, 1.8}, 9), 1.8);
  EXPECT_EQ(BatchGain({1, 1.5}, 0), 0);
  EXPECT_EQ(BatchGain({}, 3), 3);
}

}  // namespace
}  // namespace sluice::sim
