#include "sim/simulator.h"

#include <algorithm>

#include <gtest/gtest.h>

#include "sim/workloads.h"

namespace sluice::sim {
namespace {

SimConfig Images(int gpus, double hours, double load, std::uint64_t seed = 7) {
  Result<SimConfig> c = BuiltinWorkload("image", gpus, hours, load, seed);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return *c;
}

const PoolResult& Pool(const SimResult& r, const std::string& stage) {
  for (const PoolResult& p : r.pools) {
    if (p.stage == stage) {
      return p;
    }
  }
  ADD_FAILURE() << "no pool " << stage;
  return r.pools.front();
}

TEST(SimulatorTest, TheSameSeedGivesTheSameRun) {
  const SimConfig c = Images(24, 0.2, 0.7);
  Result<SimResult> a = Simulate(c);
  Result<SimResult> b = Simulate(c);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->events, b->events);
  EXPECT_EQ(a->classes[0].completed, b->classes[0].completed);
  EXPECT_EQ(a->classes[0].latency_s.p99, b->classes[0].latency_s.p99);
  SimConfig other = c;
  other.seed = 8;
  Result<SimResult> d = Simulate(other);
  ASSERT_TRUE(d.ok());
  EXPECT_NE(a->classes[0].latency_s.p99, d->classes[0].latency_s.p99);
}

TEST(SimulatorTest, UtilizationFollowsTheOfferedLoadAndEveryJobFinishes) {
  // 40 GPUs of FLUX at 60% of the denoise pool: arrivals ~6/s for 30 min.
  Result<SimResult> r = Simulate(Images(40, 0.5, 0.6));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ClassResult& k = r->classes[0];
  EXPECT_GT(k.submitted, 5000u);
  EXPECT_EQ(k.completed, k.submitted) << "a stable system finishes everything";
  EXPECT_EQ(k.failed + k.refused + k.unfinished, 0u);
  EXPECT_NEAR(Pool(*r, "denoise").utilization, 0.6, 0.05);
  // A job costs encode + 28 steps + decode (~4.25 s) and little waiting.
  EXPECT_GT(k.latency_s.p50, 4.0);
  EXPECT_LT(k.latency_s.p50, 6.0);
  EXPECT_LE(k.ttff_s.p99, k.latency_s.p99 + 1e-9);
}

TEST(SimulatorTest, WithoutOvercommitDecodeSlotsCapTheDenoisePool) {
  // The scheduler's default admits a denoise job only with a free decode
  // slot reserved for its whole denoise: 3 decode GPUs keep 36 denoise
  // GPUs at most 3 busy, and the queue grows without bound.
  SimConfig c = Images(40, 0.2, 0.6);
  ASSERT_GT(c.admission_overcommit, 1);
  c.admission_overcommit = 0;
  Result<SimResult> r = Simulate(c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_LT(Pool(*r, "denoise").utilization, 0.12);
  EXPECT_GT(Pool(*r, "denoise").max_queued, 1000u);
}

TEST(SimulatorTest, OverloadSaturatesTheDenoisePoolAndQueuesGrow) {
  Result<SimResult> calm = Simulate(Images(40, 0.3, 0.5));
  Result<SimResult> over = Simulate(Images(40, 0.3, 1.3));
  ASSERT_TRUE(calm.ok() && over.ok());
  EXPECT_GT(Pool(*over, "denoise").utilization, 0.95);
  EXPECT_GT(Pool(*over, "denoise").max_queued, 100u);
  EXPECT_GT(over->classes[0].latency_s.p99, 10 * calm->classes[0].latency_s.p99);
}

TEST(SimulatorTest, FailedGpusRerunTheirWorkAndJobsStillFinish) {
  SimConfig c = Images(30, 0.3, 0.5);
  c.mtbf_s = 600;  // Each GPU fails every 10 minutes on average.
  c.repair_s = 30;
  Result<SimResult> r = Simulate(c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->worker_failures, 20u);
  const ClassResult& k = r->classes[0];
  EXPECT_EQ(k.completed + k.failed, k.submitted);
  EXPECT_GT(static_cast<double>(k.completed), 0.99 * static_cast<double>(k.submitted));
}

TEST(SimulatorTest, AVideoStreamsItsFirstFramesBeforeItsDecodeEnds) {
  Result<SimConfig> c = BuiltinWorkload("video", 40, 1, 0.5, 3);
  ASSERT_TRUE(c.ok());
  Result<SimResult> r = Simulate(*c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ClassResult& k = r->classes[0];
  ASSERT_GT(k.completed, 0u);
  // Decode takes ~2.3 s; its first frames come after ~1/21 of it.
  EXPECT_LT(k.ttff_s.p50, k.latency_s.p50 - 1.5);
  EXPECT_GT(k.latency_s.p50, 250);  // 50 steps of 5.06 s.
}

TEST(SimulatorTest, ColocatedRunsEveryStageOnOneGpuWithTheSameArrivals) {
  Result<SimConfig> split = BuiltinWorkload("video", 40, 1, 0.5, 3);
  Result<SimConfig> one = BuiltinWorkload("video", 40, 1, 0.5, 3, /*colocated=*/true);
  ASSERT_TRUE(split.ok() && one.ok());
  ASSERT_EQ(one->pools.size(), 1u);
  EXPECT_EQ(one->pools[0].gpus, 40);
  EXPECT_EQ(one->arrivals[0].rate_per_s, split->arrivals[0].rate_per_s) << "equal load";
  const StageProfile& all = one->models[0].stages[0];
  // encode 0.89 + denoise 253 + decode 2.4: Wan 480p's colocated 39 GB fit
  // an 80 GB GPU.
  EXPECT_NEAR(all.service.mean_s, 0.89 + 50 * 5.06 + 2.4, 1e-9);
  EXPECT_NEAR(Colocated(WanVideoProfile(), 1).stages[0].service.mean_s, 0.89 + 50 * 5.06 + 2.4,
              1e-9);
  // On 24 GB GPUs the decode pays the profile's 1.3 (offloaded or tiled).
  Result<SimConfig> small = BuiltinWorkload("video", 40, 1, 0.5, 3, /*colocated=*/true, 24);
  ASSERT_TRUE(small.ok());
  EXPECT_NEAR(small->models[0].stages[0].service.mean_s, 0.89 + 50 * 5.06 + 2.4 * 1.3, 1e-9);
  EXPECT_FALSE(BuiltinWorkload("video", 40, 1, 0.5, 3, true, 0).ok());
  EXPECT_LT(all.first_output_fraction, 1.0);
  Result<SimResult> a = Simulate(*split);
  Result<SimResult> b = Simulate(*one);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(b->classes[0].unfinished, 0u);
  // Colocated, every GPU also encodes and decodes: the same jobs take more
  // of the GPUs' time than on the disaggregated denoise pool alone.
  EXPECT_GT(b->pools[0].utilization, 0.45);
  EXPECT_GT(b->classes[0].latency_s.p50, 250.0);
}

// A colocated GPU holds the encoder, the DiT and the VAE decode at once:
// only a model whose peak exceeds the GPU's memory pays for its decode.
TEST(SimulatorTest, AColocatedDecodePaysItsPenaltyOnlyWhereTheModelDoesNotFit) {
  for (const ::sluice::ModelProfile& p : ::sluice::ModelProfiles()) {
    Result<ModelProfile> m = BuiltinModel(p.name);
    ASSERT_TRUE(m.ok()) << p.name;
    EXPECT_GT(m->colocated_peak_gb, 0) << p.name;
    // Wan 720p (69.1 GB published with the DiT offloaded for the decode,
    // 97 GB without) is the one that does not fit 80 GB.
    EXPECT_DOUBLE_EQ(ColocatedDecodePenalty(*m, 80), p.name == "wan2.1-720p" ? 1.3 : 1.0) << p.name;
    EXPECT_DOUBLE_EQ(ColocatedDecodePenalty(*m, 24), 1.3) << p.name;
    EXPECT_DOUBLE_EQ(ColocatedDecodePenalty(*m, 141), 1.0) << p.name;
  }
}

// Bursts: four times the rate for 60 s of every 600 s bring 1.3 times the
// jobs and a queue the steady stream never builds; a burst as long as its
// period is refused.
TEST(SimulatorTest, BurstsRaiseTheRateForPartOfEachPeriod) {
  Result<SimConfig> c = BuiltinWorkload("image", 40, 1, 0.6, 3);
  ASSERT_TRUE(c.ok());
  Result<SimResult> steady = Simulate(*c);
  for (Arrivals& a : c->arrivals) {
    a.burst_factor = 4;
    a.burst_every_s = 600;
    a.burst_s = 60;
  }
  Result<SimResult> bursty = Simulate(*c);
  ASSERT_TRUE(steady.ok() && bursty.ok()) << bursty.status().ToString();
  const double ratio = static_cast<double>(bursty->classes[0].submitted) /
                       static_cast<double>(steady->classes[0].submitted);
  EXPECT_NEAR(ratio, 1.3, 0.05);
  std::size_t steady_queue = 0, bursty_queue = 0;
  for (std::size_t p = 0; p < steady->pools.size(); ++p) {
    steady_queue = std::max(steady_queue, steady->pools[p].max_queued);
    bursty_queue = std::max(bursty_queue, bursty->pools[p].max_queued);
  }
  EXPECT_GT(bursty_queue, steady_queue + 20);
  EXPECT_GT(bursty->classes[0].latency_s.p99, steady->classes[0].latency_s.p99);
  c->arrivals[0].burst_s = 600;
  EXPECT_EQ(Simulate(*c).status().code(), StatusCode::kInvalidArgument);
}

// The store holds each payload from its stage's end until the next stage
// is done: unbounded, nothing waits; at 10 MB (two 4 MiB conditions held
// through their 253 s denoise) encodes wait for room, denoise starves, and
// every job still finishes, later. An output larger than the store is
// refused.
TEST(SimulatorTest, AFullStoreHoldsStageEndsUntilItHasRoom) {
  Result<SimConfig> c = BuiltinWorkload("video", 40, 0.5, 0.5, 3);
  ASSERT_TRUE(c.ok());
  Result<SimResult> open = Simulate(*c);
  ASSERT_TRUE(open.ok());
  EXPECT_EQ(open->store_waits, 0u);
  EXPECT_GT(open->store_peak_bytes, 8e6) << "payloads of several jobs at once";
  c->store_bytes = 10e6;
  Result<SimResult> small = Simulate(*c);
  ASSERT_TRUE(small.ok()) << small.status().ToString();
  EXPECT_GT(small->store_waits, 0u);
  EXPECT_GT(small->store_wait_max_s, 100.0) << "an encode waits out a denoise";
  EXPECT_LE(small->store_peak_bytes, 10e6);
  EXPECT_EQ(small->classes[0].unfinished, 0u);
  EXPECT_GT(small->classes[0].completed, 100u);
  EXPECT_GT(small->classes[0].latency_s.p50, 2 * open->classes[0].latency_s.p50);
  c->store_bytes = 1e6;
  EXPECT_EQ(Simulate(*c).status().code(), StatusCode::kInvalidArgument);
}

TEST(SimulatorTest, EveryModelProfileIsABuiltinModelWithItsTimingsAndSizes) {
  for (const ::sluice::ModelProfile& p : ::sluice::ModelProfiles()) {
    Result<ModelProfile> m = BuiltinModel(p.name);
    ASSERT_TRUE(m.ok()) << p.name;
    ASSERT_EQ(m->stages.size(), 3u);
    EXPECT_EQ(m->video, p.video);
    EXPECT_DOUBLE_EQ(m->stages[0].service.mean_s, p.encode_s);
    EXPECT_DOUBLE_EQ(m->stages[1].service.mean_s, p.steps * p.step_s);
    EXPECT_EQ(m->stages[1].steps, p.steps);
    EXPECT_DOUBLE_EQ(m->stages[2].service.mean_s, p.decode_s);
    EXPECT_EQ(m->stages[2].first_output_fraction, ::sluice::kFirstOutputShare);
    // The payloads each stage hands on: the condition and the latent in
    // bf16, the encoded output.
    const auto bf16 = [](const std::vector<std::int64_t>& shape) {
      std::uint64_t n = 2;
      for (std::int64_t d : shape) {
        n *= static_cast<std::uint64_t>(d);
      }
      return n;
    };
    EXPECT_EQ(m->stages[0].output_bytes, bf16(p.condition_shape)) << p.name;
    EXPECT_EQ(m->stages[1].output_bytes, bf16(p.latent_shape)) << p.name;
    EXPECT_EQ(m->stages[2].output_bytes, p.encoded_bytes()) << p.name;
    const ModelProfile exact = SimProfile(p, 0.01, /*exact=*/true);
    EXPECT_DOUBLE_EQ(exact.stages[1].service.mean_s, p.steps * p.step_s * 0.01);
    EXPECT_EQ(exact.stages[1].service.cv, 0);
  }
  // FLUX's condition is 512 x 4096 bf16 (4 MiB).
  EXPECT_EQ(FluxImageProfile().stages[0].output_bytes, 4u << 20);
  Result<ModelProfile> none = BuiltinModel("sdxl");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("hunyuan-720p"), std::string::npos);
}

TEST(SimulatorTest, KeepsSortedSamplesAndAUtilizationSeriesForPlots) {
  SimConfig c = Images(24, 0.2, 0.7);
  c.keep_samples = true;
  c.series_interval_s = 60;
  Result<SimResult> r = Simulate(c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ClassResult& k = r->classes.front();
  ASSERT_EQ(k.latency_samples.size(), k.completed);
  EXPECT_TRUE(std::is_sorted(k.latency_samples.begin(), k.latency_samples.end()));
  EXPECT_EQ(ShareWithin(k.latency_samples, k.latency_s.p50), 0.5 + 0.5 / k.completed);
  EXPECT_EQ(ShareWithin(k.latency_samples, 1e9), 1.0);
  // 720 s of arrivals in minutes, then the drain's.
  const PoolResult& d = Pool(*r, "denoise");
  ASSERT_GE(d.utilization_series.size(), 12u);
  double mean = 0;
  for (std::size_t i = 0; i < 12; ++i) {
    mean += d.utilization_series[i] / 12;
  }
  EXPECT_NEAR(mean, d.utilization, 0.05);
  c.keep_samples = false;
  c.series_interval_s = 0;
  Result<SimResult> plain = Simulate(c);
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(plain->classes.front().latency_samples.empty());
  EXPECT_TRUE(Pool(*plain, "denoise").utilization_series.empty());
  EXPECT_EQ(plain->classes.front().latency_s.p99, k.latency_s.p99);
}

TEST(SimulatorTest, OnePoolServesSeveralModelsAndImagesShareItWithVideos) {
  SimConfig c;
  c.models = {FluxImageProfile(), WanVideoProfile()};
  for (const char* stage : {"encode", "denoise", "decode"}) {
    c.pools.push_back({"flux-1024", stage, 4, 1, {"wan2.1-480p"}});
  }
  c.arrivals = {{"flux-1024", orchestrator::PriorityClass::kInteractive, 0.2},
                {"wan2.1-480p", orchestrator::PriorityClass::kBatch, 0.01}};
  c.duration_s = 3600;
  c.keep_samples = true;
  Result<SimResult> r = Simulate(c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->pools.size(), 3u);
  EXPECT_EQ(r->pools[1].model, "flux-1024+wan2.1-480p");
  ASSERT_EQ(r->classes.size(), 2u);
  for (const ClassResult& k : r->classes) {
    EXPECT_GT(k.completed, 0u) << k.model;
    EXPECT_EQ(k.unfinished, 0u) << k.model;
  }
  // Images share the GPUs with videos: their tail is longer than on the
  // same pools without videos.
  const ClassResult& images = r->classes[0];
  EXPECT_EQ(images.model, "flux-1024");
  SimConfig alone = c;
  alone.arrivals.pop_back();
  Result<SimResult> a = Simulate(alone);
  ASSERT_TRUE(a.ok());
  EXPECT_GT(images.latency_s.p99, a->classes[0].latency_s.p99 + 0.2);
  // A pool naming an unknown model is refused.
  c.pools[1].more_models = {"sdxl"};
  EXPECT_EQ(Simulate(c).status().code(), StatusCode::kInvalidArgument);
}

TEST(SimulatorTest, BadConfigsAreRefusedByName) {
  EXPECT_EQ(BuiltinWorkload("audio", 10, 1, 0.5, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(BuiltinWorkload("mixed", 5, 1, 0.5, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(BuiltinWorkload("image", 10, 1, 0, 1).status().code(), StatusCode::kInvalidArgument);
  SimConfig c = Images(10, 0.1, 0.5);
  c.pools.pop_back();  // decode has no pool.
  Status s = Simulate(c).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("decode"), std::string_view::npos) << s.ToString();
  c = Images(10, 0.1, 0.5);
  c.pools[0].stage = "upscale";
  EXPECT_NE(Simulate(c).status().message().find("upscale"), std::string_view::npos);
  c = Images(10, 0.1, 0.5);
  c.models[0].stages[1].service.cv = -1;
  EXPECT_EQ(Simulate(c).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice::sim
