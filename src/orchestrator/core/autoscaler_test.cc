#include "orchestrator/core/autoscaler.h"

#include <gtest/gtest.h>

namespace sluice::orchestrator {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

AutoscaleOptions Fast() {
  AutoscaleOptions o;
  o.window = seconds(5);
  o.target_utilization = 0.75;
  o.scale_down_below = 0.5;
  o.up_cooldown = seconds(2);
  o.down_cooldown = seconds(10);
  o.min_workers = 1;
  o.max_workers = 8;
  return o;
}

PoolLoad Denoise(int workers, double busy, std::size_t queued) {
  return {"flux", "denoise", workers, workers, busy, queued};
}

// Feeds `sample` once a second over [from, to) and returns the last
// recommendation.
PoolRecommendation Feed(Autoscaler& a, TimePoint t0, int from, int to, const PoolLoad& sample) {
  std::vector<PoolRecommendation> r;
  for (int s = from; s < to; ++s) {
    a.Observe({sample}, t0 + seconds(s));
    r = a.Recommend(t0 + seconds(s));
  }
  EXPECT_EQ(r.size(), 1u);
  return r.empty() ? PoolRecommendation{} : r.front();
}

TEST(AutoscalerTest, AQueueGrowsThePoolToItsDemandAtTheTargetUtilization) {
  Autoscaler a(Fast());
  const TimePoint t0{};
  // Two workers, both busy, three jobs waiting: 2 / 0.75 + 3.
  const PoolRecommendation r = Feed(a, t0, 0, 1, Denoise(2, 2, 3));
  EXPECT_EQ(r.workers, 2);
  EXPECT_EQ(r.recommended, 6);
  EXPECT_DOUBLE_EQ(r.utilization, 1.0);
  EXPECT_DOUBLE_EQ(r.queued, 3.0);
  // Never past the bounds.
  EXPECT_EQ(Feed(a, t0, 3, 4, Denoise(2, 2, 30)).recommended, 8);
}

TEST(AutoscalerTest, GrowthWaitsForTheUpCooldown) {
  Autoscaler a(Fast());
  const TimePoint t0{};
  EXPECT_EQ(Feed(a, t0, 0, 1, Denoise(2, 2, 1)).recommended, 4);
  // One second later demand is higher, but the last change was 1 s ago.
  a.Observe({Denoise(4, 4, 4)}, t0 + seconds(1));
  EXPECT_EQ(a.Recommend(t0 + seconds(1)).front().recommended, 4);
  a.Observe({Denoise(4, 4, 4)}, t0 + seconds(2));
  EXPECT_GT(a.Recommend(t0 + seconds(2)).front().recommended, 4);
}

TEST(AutoscalerTest, BelowTheTargetAShortQueueIsNoDemand) {
  Autoscaler a(Fast());
  // One worker 60% busy with a job now and then waiting: it keeps up.
  EXPECT_EQ(Feed(a, TimePoint{}, 0, 30, Denoise(1, 0.6, 1)).recommended, 1);
}

TEST(AutoscalerTest, APoolDoesNotShrinkToASizeItWouldGrowBackFrom) {
  Autoscaler a(Fast());
  // Two workers 30% busy: below the floor (0.5), but one would be 60%,
  // above it (and near the target, where a wobble grows it back).
  EXPECT_EQ(Feed(a, TimePoint{}, 0, 60, Denoise(2, 0.6, 0)).recommended, 2);
  // At 20% one would be 40%: it shrinks.
  EXPECT_EQ(Feed(a, TimePoint{}, 60, 80, Denoise(2, 0.4, 0)).recommended, 1);
}

TEST(AutoscalerTest, APoolSeenBeforeItsWorkersStartsFromTheirCount) {
  Autoscaler a(Fast());
  EXPECT_EQ(Feed(a, TimePoint{}, 0, 2, Denoise(0, 0, 0)).recommended, 1);
  // Four workers register, idle: the recommendation starts at four and
  // comes down one per cooldown, not at once.
  EXPECT_EQ(Feed(a, TimePoint{}, 2, 4, Denoise(4, 0, 0)).recommended, 4);
}

TEST(AutoscalerTest, BetweenTheThresholdsThePoolKeepsItsSize) {
  Autoscaler a(Fast());
  const TimePoint t0{};
  // 4 workers at 60% busy: below the target (no growth), above the floor
  // (no shrinking), for a minute.
  EXPECT_EQ(Feed(a, t0, 0, 60, Denoise(4, 2.4, 0)).recommended, 4);
}

TEST(AutoscalerTest, AnIdlePoolShrinksOneWorkerPerCooldownDownToItsMinimum) {
  Autoscaler a(Fast());
  const TimePoint t0{};
  EXPECT_EQ(Feed(a, t0, 0, 9, Denoise(4, 0.5, 0)).recommended, 4) << "not yet 10 s low";
  EXPECT_EQ(Feed(a, t0, 9, 11, Denoise(4, 0.5, 0)).recommended, 3);
  EXPECT_EQ(Feed(a, t0, 11, 20, Denoise(3, 0.5, 0)).recommended, 3) << "a cooldown per step";
  EXPECT_EQ(Feed(a, t0, 20, 22, Denoise(3, 0.5, 0)).recommended, 2);
  EXPECT_EQ(Feed(a, t0, 22, 100, Denoise(2, 0, 0)).recommended, 1);
  // A burst resets the low run: growth, and the quiet must start over.
  EXPECT_GT(Feed(a, t0, 100, 106, Denoise(1, 1, 3)).recommended, 1);
}

TEST(AutoscalerTest, APoolLeavesTheWindowAndBadOptionsAreRefused) {
  Autoscaler a(Fast());
  const TimePoint t0{};
  a.Observe({Denoise(2, 1, 0)}, t0);
  a.Observe({}, t0 + seconds(6));
  EXPECT_TRUE(a.Recommend(t0 + seconds(6)).empty());

  EXPECT_TRUE(ValidateAutoscaleOptions(Fast()).ok());
  AutoscaleOptions o = Fast();
  o.target_utilization = 1.5;
  EXPECT_NE(ValidateAutoscaleOptions(o).message().find("target_utilization"), std::string::npos);
  o = Fast();
  o.scale_down_below = 0.8;
  EXPECT_NE(ValidateAutoscaleOptions(o).message().find("scale_down_below"), std::string::npos);
  o = Fast();
  o.min_workers = 5;
  o.max_workers = 4;
  EXPECT_NE(ValidateAutoscaleOptions(o).message().find("min_workers"), std::string::npos);
  o = Fast();
  o.window = milliseconds(0);
  EXPECT_FALSE(ValidateAutoscaleOptions(o).ok());
}

// A missed latency SLO grows the model's busiest pool by one worker per
// up cooldown although its utilization (0.6 of 0.75) asks for none, until
// the SLO holds; near the SLO no pool shrinks. Without an SLO, latencies
// change nothing.
TEST(AutoscalerTest, AMissedLatencySloGrowsTheBusiestPoolUntilItHolds) {
  AutoscaleOptions o = Fast();
  o.slo_p99 = seconds(2);
  Autoscaler a(o);
  Autoscaler no_slo(Fast());
  const TimePoint t0{};
  const PoolLoad encode{"flux", "encode", 2, 2, 0.2, 0};
  // Seconds [from, to): denoise on `workers` at `busy` slots, a job of
  // `latency_s` finishing each second; the last recommendation.
  auto feed = [&](Autoscaler& x, int from, int to, int workers, double busy, double latency_s) {
    std::vector<PoolRecommendation> last;
    for (int s = from; s < to; ++s) {
      const TimePoint now = t0 + seconds(s);
      x.Observe({Denoise(workers, busy, 0), encode}, now);
      x.ObserveLatency("flux", latency_s, now);
      last = x.Recommend(now);
    }
    return last;
  };
  std::vector<PoolRecommendation> r;
  for (int s = 0; s < 8; ++s) {
    r = feed(a, s, s + 1, 4, 2.4, 3.0);  // Over the 2 s SLO.
    EXPECT_EQ(feed(no_slo, s, s + 1, 4, 2.4, 3.0)[0].recommended, 4) << s;
  }
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].stage, "denoise");  // Pools in (model, stage) order.
  EXPECT_DOUBLE_EQ(r[0].latency_p99_s, 3.0);
  // One more at 0 s; then only jobs submitted since a growth judge it (a
  // 3 s job finishing at 2 s came before): at 3 s and 6 s, one more each.
  EXPECT_EQ(r[0].recommended, 7);
  EXPECT_EQ(r[1].recommended, 2) << "the encode pool is not the bottleneck";
  // The SLO holds once the window (5 s) has only fast jobs; at 1.9 s (near
  // it) nothing shrinks though the pool is idle, at 1 s it does.
  EXPECT_EQ(feed(a, 8, 30, 7, 0.5, 1.9)[0].recommended, 7);
  EXPECT_LT(feed(a, 30, 50, 7, 0.5, 1.0)[0].recommended, 7);
  o.slo_shrink_below = 0;
  EXPECT_FALSE(ValidateAutoscaleOptions(o).ok());
}

}  // namespace
}  // namespace sluice::orchestrator
