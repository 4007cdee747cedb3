// `sluice serve --elastic`: the embedded deployment resizes its pools to
// the orchestrator's recommendations under a load step. Profile stages
// (FLUX at a twentieth of its published time: a 0.19 s denoise) over the
// HTTP API.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "sluice/client/http_client.h"
#include "sluice/serve/embedded.h"

#include "bench/job_timeline.h"
#include "common/testing/eventually.h"

namespace sluice::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct Sent {
  std::string id;
  double at_s = 0;  // Since the run's start.
};

// Submits Poisson arrivals at `rate` for `seconds` (a fixed seed), and
// records the denoise pool's size every 100 ms meanwhile.
void Load(const std::string& url, double rate, double seconds, Clock::time_point start,
          std::vector<Sent>* sent, std::mt19937_64& rng) {
  std::exponential_distribution<double> gap(rate);
  const Clock::time_point begin = Clock::now();
  for (double t = gap(rng); t < seconds; t += gap(rng)) {
    std::this_thread::sleep_until(
        begin + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(t)));
    client::GenerateRequest r;
    r.prompt = "elastic " + std::to_string(sent->size());
    r.model = "flux-1024";
    r.priority = "interactive";
    Result<std::string> id = client::Submit(url, r);
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    sent->push_back({*id, std::chrono::duration<double>(Clock::now() - start).count()});
  }
}

TEST(ElasticTest, ALoadStepGrowsThePoolUntilTheSloHoldsAndTheDropShrinksItWithoutLosingJobs) {
  EmbeddedConfig c;
  c.http_listen = "127.0.0.1:0";
  c.stages = "flux-1024";
  c.time_factor = 0.05;  // Denoise 28 x 6.95 ms = 0.19 s.
  c.workers = 3;         // 1 encode, 1 denoise, 1 decode to start.
  c.max_queued_jobs = 10000;
  c.elastic = true;
  c.autoscale.window = 5s;
  c.autoscale.target_utilization = 0.75;
  c.autoscale.scale_down_below = 0.5;
  c.autoscale.up_cooldown = 2s;
  c.autoscale.down_cooldown = 2s;
  c.autoscale.min_workers = 1;
  c.autoscale.max_workers = 6;
  c.autoscale.slo_p99 = 1s;  // The SLO the pools are sized to hold.
  auto cluster = EmbeddedCluster::Start(c);
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  EmbeddedCluster& e = **cluster;
  const std::string url = "http://" + e.http_endpoint();
  ASSERT_EQ(e.pool_workers("denoise"), 1);

  std::atomic<bool> done{false};
  std::vector<std::pair<double, int>> sizes;  // (seconds, denoise workers)
  int most_recommended = 0;                   // By the orchestrator, for FLUX's denoise pool.
  const Clock::time_point start = Clock::now();
  std::thread watch([&] {
    while (!done) {
      sizes.emplace_back(std::chrono::duration<double>(Clock::now() - start).count(),
                         e.pool_workers("denoise"));
      for (const PoolRecommendation& r : e.recommendations()) {
        if (r.model == "flux-1024" && r.stage == "denoise") {
          most_recommended = std::max(most_recommended, r.recommended);
        }
      }
      std::this_thread::sleep_for(100ms);
    }
  });
  std::vector<Sent> sent;
  std::mt19937_64 rng(7);
  // 2 jobs/s: one denoise worker ~45% busy. Then twice that: one worker
  // ~90% busy, whose queue puts the p99 past the SLO. Then 0.5 jobs/s.
  Load(url, 2, 10, start, &sent, rng);
  const double step_at = std::chrono::duration<double>(Clock::now() - start).count();
  Load(url, 4, 20, start, &sent, rng);
  // What an external autoscaler reads: the orchestrator's recommendation
  // for the pool, and the same as a metric.
  httplib::Client probe(url);
  auto autoscale = probe.Get("/v1/autoscale");
  ASSERT_TRUE(autoscale && autoscale->status == 200);
  const nlohmann::json pools = nlohmann::json::parse(autoscale->body)["pools"];
  bool seen = false;
  for (const nlohmann::json& p : pools) {
    if (p["model"] == "flux-1024" && p["stage"] == "denoise") {
      seen = true;
      EXPECT_GE(p["recommended"].get<int>(), 1) << p.dump();
      EXPECT_GE(p["workers"].get<int>(), 1) << p.dump();
      EXPECT_GT(p["utilization"].get<double>(), 0.0) << p.dump();
      EXPECT_GT(p["latency_p99_s"].get<double>(), 0.0) << p.dump();
    }
  }
  EXPECT_TRUE(seen) << autoscale->body;
  auto metrics = probe.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find(
                "sluice_orchestrator_recommended_workers{model=\"flux-1024\",stage=\"denoise\"}"),
            std::string::npos);
  const double drop_at = std::chrono::duration<double>(Clock::now() - start).count();
  Load(url, 0.5, 16, start, &sent, rng);
  done = true;
  watch.join();

  // Every job finished, and succeeded: none was lost to a drained worker.
  httplib::Client http(url);
  http.set_read_timeout(120, 0);
  std::vector<double> early_in_step, late_in_step;  // Latencies: the step's first 4 s, last 6 s.
  for (const Sent& s : sent) {
    const bench::Timeline t = bench::ReadTimeline(http, s.id);
    EXPECT_TRUE(t.succeeded) << s.id;
    if (s.at_s > step_at && s.at_s < step_at + 4) {
      early_in_step.push_back(t.latency_s);
    }
    if (s.at_s > drop_at - 6 && s.at_s < drop_at) {
      late_in_step.push_back(t.latency_s);
    }
  }
  int before = 0, peak = 0, end = 0;
  for (const auto& [at, n] : sizes) {
    before = at < step_at ? std::max(before, n) : before;
    peak = at >= step_at && at < drop_at ? std::max(peak, n) : peak;
    end = n;
  }
  auto p99 = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() * 99 / 100];
  };
  std::printf(
      "denoise workers: %d before the step, %d at most during it, %d at the end; "
      "p99 %.3f s in the step's first 4 s, %.3f s in its last 6 s; %zu jobs\n",
      before, peak, end, p99(early_in_step), p99(late_in_step), sent.size());
  EXPECT_EQ(before, 1) << "2 jobs/s needs one denoise worker";
  EXPECT_GE(peak, 2) << "4 jobs/s at 0.75 utilization needs two";
  EXPECT_GE(most_recommended, 2) << "the orchestrator's own recommendation";
  EXPECT_LE(end, 2) << "0.5 jobs/s: drained back down";
  EXPECT_LT(end, peak);
  // The SLO holds again once the pool has grown: p99 within 1 s (a job
  // alone takes ~0.25 s).
  ASSERT_GT(late_in_step.size(), 10u);
  EXPECT_LT(p99(late_in_step), 1.0);
}

// Colocated, the one pool is denoise's: the pipeline's other stages get
// no workers of their own (nor colocated ones for them), and an idle pool
// keeps its size until its down cooldown.
TEST(ElasticTest, AColocatedDeploymentResizesOnlyItsOnePool) {
  EmbeddedConfig c;
  c.http_listen = "127.0.0.1:0";
  c.stages = "flux-1024";
  c.colocated = true;
  c.workers = 2;
  c.elastic = true;
  c.autoscale.window = 2s;
  c.autoscale.down_cooldown = 60s;
  c.autoscale.min_workers = 1;
  c.autoscale.max_workers = 4;
  auto cluster = EmbeddedCluster::Start(c);
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  // Four decisions (two windows' worth) made and applied over the idle
  // pools: none resized one.
  EXPECT_TRUE(internal::Eventually([&] { return (*cluster)->elastic_decisions() >= 4; }, 30s));
  EXPECT_EQ((*cluster)->pool_workers("denoise"), 2);
  EXPECT_EQ((*cluster)->pool_workers("encode"), 0);
}

}  // namespace
}  // namespace sluice::testing
