// The embedded deployment end to end (`sluice serve` in-process): reference
// stages over the HTTP API, disaggregated against colocated, cancel in
// every stage, overload.
#include <httplib.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "sluice/client/http_client.h"
#include "sluice/serve/embedded.h"

#include "base64.h"
#include "embedded_start.h"
#include "runtime/reference/pipeline.h"

namespace sluice::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

// Twenty small mixed requests: 16 images and 4 videos.
std::vector<client::GenerateRequest> MixedJobs() {
  std::vector<client::GenerateRequest> jobs;
  for (int i = 0; i < 20; ++i) {
    client::GenerateRequest r;
    r.prompt = "job " + std::to_string(i) + (i % 2 ? " a harbour" : " a forest");
    r.seed = i;
    r.steps = 3;
    r.video = i % 5 == 4;
    r.size = r.video ? "64x64" : "96x64";
    r.frames = 6;
    r.priority = i % 3 == 0 ? "interactive" : "standard";
    jobs.push_back(r);
  }
  return jobs;
}

// Waits (bounded) until the store holds nothing of any job (the condition
// cache's entries are no job's).
bool StoreDrains(const EmbeddedCluster& c, std::chrono::milliseconds within) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  while (c.store_job_objects() != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  return c.store_job_objects() == 0;
}

// Submits every job at once and returns each one's result bytes.
std::vector<std::string> RunAll(EmbeddedCluster& c,
                                const std::vector<client::GenerateRequest>& jobs) {
  const std::string url = "http://" + c.http_endpoint();
  std::vector<std::string> ids;
  const auto at = std::chrono::steady_clock::now();
  for (const auto& r : jobs) {
    auto id = client::Submit(url, r);
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    ids.push_back(id.ok() ? *id : "");
  }
  std::vector<std::string> out;
  for (const std::string& id : ids) {
    auto o = client::WaitAndFetch(url, id, /*mp4=*/false, at, 120s);
    EXPECT_TRUE(o.ok()) << o.status().ToString();
    EXPECT_EQ(o.ok() ? o->status : "", "succeeded") << id << (o.ok() ? o->error : "");
    out.push_back(o.ok() ? o->content : "");
  }
  return out;
}

TEST(ServeTest, TwentyMixedJobsCompleteWithTheSameBytesDisaggregatedAndColocated) {
  const std::vector<client::GenerateRequest> jobs = MixedJobs();
  std::vector<std::string> disagg, colocated;
  {
    EmbeddedConfig c;
    c.workers = 4;
    auto cluster = StartEmbedded(c);
    ASSERT_NE(cluster, nullptr);
    disagg = RunAll(*cluster, jobs);
    // Every stage output is removed once its consumer is done.
    EXPECT_TRUE(StoreDrains(*cluster, 10s)) << cluster->store_bytes_used() << " bytes left";
  }
  {
    EmbeddedConfig c;
    c.workers = 4;
    c.colocated = true;
    auto cluster = StartEmbedded(c);
    ASSERT_NE(cluster, nullptr);
    colocated = RunAll(*cluster, jobs);
  }
  ASSERT_EQ(disagg.size(), jobs.size());
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    EXPECT_FALSE(disagg[i].empty());
    EXPECT_EQ(disagg[i], colocated[i]) << "job " << i;
  }
  // And both equal the pipeline run in one place.
  json body = {{"prompt", jobs[4].prompt},
               {"size", jobs[4].size},
               {"seed", jobs[4].seed},
               {"steps", 3},
               {"frames", 6}};
  auto r = reference::ParseRequest(body.dump(), 12, 4.0f);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(reference::GenerateAll(*r)->first, disagg[4]);
}

// The shipped model learned 128x128 scenes and its workers say so: a
// request without a size gets 128x128, not the front's 256x256 (where it
// drew objects at twice the scale it knows).
TEST(ServeTest, ARequestWithoutASizeGetsTheSizeTheModelWasTrainedAt) {
  EmbeddedConfig c;
  c.workers = 3;
  auto cluster = StartEmbedded(c);
  ASSERT_NE(cluster, nullptr);
  httplib::Client http("http://" + cluster->http_endpoint());
  http.set_read_timeout(60, 0);
  auto r =
      http.Post("/v1/images/generations",
                R"({"prompt":"a small red circle on the left on a blue background","steps":2})",
                "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  // A PNG's IHDR: width and height, big-endian, at bytes 16..23.
  const std::string png = Unbase64(json::parse(r->body)["data"][0]["b64_json"]);
  ASSERT_GE(png.size(), 24u);
  ASSERT_EQ(png.substr(1, 3), "PNG");
  auto be32 = [&](std::size_t at) {
    std::uint32_t v = 0;
    for (std::size_t i = 0; i < 4; ++i) {
      v = v << 8 | static_cast<unsigned char>(png[at + i]);
    }
    return v;
  };
  EXPECT_EQ(be32(16), 128u) << "width";
  EXPECT_EQ(be32(20), 128u) << "height";
}

// Polls job `id` until `pred(job json)` holds (bounded).
bool WaitJob(const std::string& url, const std::string& id,
             const std::function<bool(const json&)>& pred, std::chrono::milliseconds within) {
  httplib::Client http(url);
  const auto deadline = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < deadline) {
    auto res = http.Get("/v1/jobs/" + id);
    if (res && res->status == 200 && pred(json::parse(res->body))) {
      return true;
    }
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

// A served job with the step cache on (asked for, or the deployment's
// default) gives the pipeline's cached bytes and counts the steps it
// skipped on its denoise stage_done event; off, the uncached bytes.
TEST(ServeTest, AStepCachedJobGivesThePipelinesBytesAndCountsItsSkippedSteps) {
  const std::string base =
      R"({"prompt":"a large red circle on the left on a blue background","size":"128x128",)"
      R"("seed":5,"steps":12)";
  // The pipeline in one place at `threshold`: the PNG and the steps skipped.
  auto local = [&](float threshold) {
    auto r = reference::ParseRequest(base + "}", 12, 4.0f);
    EXPECT_TRUE(r.ok());
    const std::vector<float> cond = reference::EncodeCondition(*r);
    std::vector<float> x = reference::InitialNoise(*r);
    reference::StepCache cache;
    cache.threshold = threshold;
    for (int i = 0; i < r->steps; ++i) {
      reference::DenoiseStep(*r, cond.data(), i, x, nullptr, nullptr, &cache);
    }
    reference::FrameDecoder dec(*r);
    EXPECT_TRUE(dec.AddLatentFrame(x.data(), 0).ok());
    return std::make_pair(dec.Output(), cache.skipped);
  };
  const std::string plain = local(0).first;
  const auto [cached, skipped] = local(0.3f);
  ASSERT_GT(skipped, 0);
  ASSERT_NE(plain, cached);
  for (const float deployment : {0.0f, 0.3f}) {
    SCOPED_TRACE("deployment default " + std::to_string(deployment));
    EmbeddedConfig c;
    c.workers = 3;
    c.step_cache_threshold = deployment;
    auto cluster = StartEmbedded(c);
    ASSERT_NE(cluster, nullptr);
    httplib::Client http("http://" + cluster->http_endpoint());
    http.set_read_timeout(60, 0);
    struct Case {
      std::string extra;  // Fields added to the request.
      const std::string* want;
      int skipped;
    };
    const int by_default = deployment > 0 ? skipped : 0;
    for (const Case& k : {Case{"", deployment > 0 ? &cached : &plain, by_default},
                          Case{R"(,"step_cache":{"threshold":0.3})", &cached, skipped},
                          Case{R"(,"step_cache":{"threshold":0})", &plain, 0}}) {
      SCOPED_TRACE(k.extra);
      auto r = http.Post("/v1/images/generations", base + k.extra + "}", "application/json");
      ASSERT_TRUE(r);
      ASSERT_EQ(r->status, 200) << r->body;
      const json body = json::parse(r->body);
      EXPECT_EQ(Unbase64(body["data"][0]["b64_json"]), *k.want);
      auto events = http.Get("/v1/jobs/" + body["id"].get<std::string>() + "/events");
      ASSERT_TRUE(events);
      json counts;
      std::istringstream lines(events->body);
      for (std::string line; std::getline(lines, line);) {
        if (line.rfind("data: ", 0) == 0) {
          const json ev = json::parse(line.substr(6));
          if (ev.value("type", "") == "stage_done" && ev.value("stage", "") == "denoise") {
            counts = ev.value("counts", json());
          }
        }
      }
      EXPECT_EQ(counts.value("steps", -1), 12) << counts;
      EXPECT_EQ(counts.value("steps_skipped", 0), k.skipped) << counts;
      EXPECT_EQ(counts.contains("steps_skipped"), k.want == &cached) << "only with the cache on";
    }
    // The cache states kept beside the checkpoints (every 4 steps) went
    // with them.
    const auto classes = cluster->store_metrics().cache_classes;
    const auto feature = classes.find("feature");
    EXPECT_TRUE(feature == classes.end() || feature->second.objects == 0)
        << feature->second.objects << " step cache states left";
  }
}

TEST(ServeTest, CancelInEveryStageLeavesTheStoreEmpty) {
  EmbeddedConfig c;
  c.workers = 3;
  c.checkpoint_every = 1;
  auto cluster = StartEmbedded(c);
  ASSERT_NE(cluster, nullptr);
  const std::string url = "http://" + cluster->http_endpoint();
  httplib::Client http(url);
  struct Case {
    const char* stage;
    client::GenerateRequest r;
    std::function<bool(const json&)> ready;
  };
  client::GenerateRequest slow_denoise;
  slow_denoise.prompt = "a long video";
  slow_denoise.video = true;
  slow_denoise.size = "320x192";
  slow_denoise.frames = 17;
  slow_denoise.steps = 200;
  client::GenerateRequest slow_decode = slow_denoise;
  slow_decode.frames = 65;
  slow_decode.size = "256x128";
  slow_decode.steps = 1;
  const std::vector<Case> cases = {
      {"encode (queued)", slow_denoise, [](const json&) { return true; }},
      {"denoise", slow_denoise,
       [](const json& j) { return j["stage"] == "denoise" && j["progress"]["step"] >= 2; }},
      {"decode", slow_decode, [](const json& j) { return j["stage"] == "decode"; }},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.stage);
    auto id = client::Submit(url, k.r);
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    ASSERT_TRUE(WaitJob(url, *id, k.ready, 60s));
    auto del = http.Delete("/v1/jobs/" + *id);
    ASSERT_TRUE(del);
    EXPECT_EQ(del->status, 200) << del->body;
    EXPECT_TRUE(WaitJob(
        url, *id, [](const json& j) { return j["status"] == "cancelled"; }, 10s));
    // Payloads and checkpoints are gone once the worker stopped.
    EXPECT_TRUE(StoreDrains(*cluster, 20s)) << cluster->store_bytes_used() << " bytes left";
  }
}

TEST(ServeTest, OverloadAnswers429AndTheStoreStaysWithinItsMemory) {
  EmbeddedConfig c;
  c.workers = 3;
  c.max_queued_jobs = 4;
  c.store_memory = std::uint64_t{16} << 20;
  auto cluster = StartEmbedded(c);
  ASSERT_NE(cluster, nullptr);
  const std::string url = "http://" + cluster->http_endpoint();
  std::vector<std::string> accepted;
  int rejected = 0;
  const auto at = std::chrono::steady_clock::now();
  for (int i = 0; i < 30; ++i) {
    client::GenerateRequest r;
    r.prompt = "burst " + std::to_string(i);
    r.size = "128x128";
    r.steps = 2;
    auto id = client::Submit(url, r);
    if (id.ok()) {
      accepted.push_back(*id);
    } else {
      EXPECT_EQ(id.status().code(), StatusCode::kResourceExhausted) << id.status().ToString();
      EXPECT_NE(id.status().message().find("429"), std::string::npos);
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 0);
  EXPECT_GE(accepted.size(), 4u);
  for (const std::string& id : accepted) {
    auto o = client::WaitAndFetch(url, id, false, at, 60s);
    ASSERT_TRUE(o.ok()) << o.status().ToString();
    EXPECT_EQ(o->status, "succeeded") << o->error;
    EXPECT_LE(cluster->store_bytes_used(), c.store_memory);
  }
  EXPECT_TRUE(StoreDrains(*cluster, 10s));
}

}  // namespace
}  // namespace sluice::testing
