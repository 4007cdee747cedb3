// Step-level batching on the embedded deployment (reference stages,
// `denoise_batch`): concurrent jobs on one denoise worker share their
// steps — with different adapters and the step cache on some (batching,
// adapters and step caching compose) — each job's picture is its
// pipeline's within float32 rounding (PSNR >= 40 dB against the job
// alone), a cancelled member leaves while the others go on, and an
// interactive job takes a batch member's slot (it yields at a checkpoint
// and resumes) or, where the worker says so, steps alone.
#include <httplib.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "sluice/serve/embedded.h"

#include "base64.h"
#include "embedded_start.h"
#include "media/png.h"
#include "reference_bytes.h"
#include "runtime/reference/adapter.h"
#include "runtime/reference/pipeline.h"

namespace sluice::testing {
namespace {

using nlohmann::json;

// The picture of `body` alone in one process: its adapters (the shipped
// mirror, by name) and step cache as it asks.
std::string Alone(const std::string& body) {
  auto r = reference::ParseRequest(body, 12, 4.0f);
  auto mirror = reference::Adapter::Open(std::string(SLUICE_SOURCE_DIR) +
                                         "/models/adapters/mirror.safetensors");
  EXPECT_TRUE(r.ok() && mirror.ok());
  std::vector<reference::LoraTerm> lora;
  for (const reference::Request::Lora& a : r->lora) {
    lora.push_back({mirror->get(), a.scale});
  }
  reference::StepCache cache;
  cache.threshold = r->step_cache.value_or(0.0f);
  const std::vector<float> cond = reference::EncodeCondition(*r);
  std::vector<float> x = reference::InitialNoise(*r);
  for (int i = 0; i < r->steps; ++i) {
    reference::DenoiseStep(*r, cond.data(), i, x, nullptr, nullptr, &cache, lora);
  }
  reference::FrameDecoder dec(*r);
  EXPECT_TRUE(dec.AddLatentFrame(x.data(), 0).ok());
  return dec.Output();
}

// Submits `body` (async); the job's id, or "" (and a test failure) when
// it is refused.
std::string Submit(httplib::Client& http, const json& body) {
  auto r = http.Post("/v1/images/generations", body.dump(), "application/json");
  EXPECT_TRUE(r && r->status == 202) << (r ? r->body : "no answer");
  return r ? json::parse(r->body).value("id", "") : "";
}

// Batch-class job k (0 or 1) of `steps` steps at 128x128: the two jobs
// the priority tests start a batch with.
json BatchClassJob(int k, int steps) {
  return {{"prompt", k == 0 ? "a large red circle on the left on a blue background"
                            : "a small green square at the top on a black background"},
          {"size", "128x128"},
          {"seed", k},
          {"steps", steps},
          {"priority", "batch"},
          {"async", true}};
}

// The interactive job (12 steps at 128x128) arriving beside them.
json InteractiveJob() {
  return {{"prompt", "a large yellow triangle on the right on a white background"},
          {"size", "128x128"},
          {"seed", 5},
          {"steps", 12},
          {"priority", "interactive"},
          {"async", true}};
}

TEST(BatchingTest, ConcurrentJobsShareStepsAndEachIsItsPipelines) {
  EmbeddedConfig c;
  c.workers = 3;
  c.denoise_batch = 4;
  c.adapters_dir = std::string(SLUICE_SOURCE_DIR) + "/models/adapters";
  auto cluster = StartEmbedded(c);
  ASSERT_NE(cluster, nullptr);
  httplib::Client http("http://" + cluster->http_endpoint());
  http.set_read_timeout(120, 0);
  const char* prompts[] = {"a large red circle on the left on a blue background",
                           "a small green square at the top on a black background",
                           "a large yellow triangle on the right on a white background",
                           "a small white diamond in the centre on a red background"};
  std::vector<std::string> ids, bodies;
  for (int k = 0; k < 4; ++k) {
    const json body = {
        {"prompt", prompts[k]}, {"size", "128x128"}, {"seed", k}, {"steps", 30}, {"async", true}};
    bodies.push_back(body.dump());
    auto r = http.Post("/v1/images/generations", body.dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 202) << r->body;
    ids.push_back(json::parse(r->body)["id"]);
  }
  // A fifth joins and is cancelled while the others run: it leaves the
  // batch, they finish.
  auto fifth = http.Post("/v1/images/generations",
                         json({{"prompt", "a small blue circle at the bottom"},
                               {"size", "128x128"},
                               {"steps", 100},
                               {"async", true}})
                             .dump(),
                         "application/json");
  ASSERT_TRUE(fifth);
  ASSERT_EQ(fifth->status, 202) << fifth->body;
  const std::string cancelled = json::parse(fifth->body)["id"];
  auto gone = http.Delete("/v1/jobs/" + cancelled);
  ASSERT_TRUE(gone);
  int batched = 0;
  for (int k = 0; k < 4; ++k) {
    auto events = http.Get("/v1/jobs/" + ids[k] + "/events");  // Ends with the job.
    ASSERT_TRUE(events);
    std::istringstream lines(events->body);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("data: ", 0) == 0 && line.find("\"stage_done\"") != std::string::npos) {
        const json e = json::parse(line.substr(6));
        if (e["stage"] == "denoise") {
          EXPECT_EQ(e["counts"]["steps"], 30) << line;
          batched += e["counts"].value("steps_batched", 0);
        }
      }
    }
    auto content = http.Get("/v1/jobs/" + ids[k] + "/content");
    ASSERT_TRUE(content);
    ASSERT_EQ(content->status, 200) << content->body.substr(0, 200);
    auto got = media::DecodePng(content->body);
    auto r = reference::ParseRequest(bodies[k], 12, 4.0f);
    ASSERT_TRUE(got.ok() && r.ok());
    auto want = media::DecodePng(Alone(bodies[k]));
    ASSERT_TRUE(want.ok());
    EXPECT_GE(Psnr(got->rgb, want->rgb), 40.0) << "job " << k;
  }
  EXPECT_GT(batched, 0) << "no step of the four concurrent jobs shared a batch";
  auto job = http.Get("/v1/jobs/" + cancelled);
  ASSERT_TRUE(job);
  EXPECT_EQ(json::parse(job->body)["status"], "cancelled") << job->body;
}

// Priorities inside a batch: a denoise worker taking two jobs runs two
// batch-class jobs as one batch; an interactive job arriving takes a slot
// from one of them (it checkpoints and yields: `preempted`), joins the
// batch and finishes first; the preempted one resumes from its checkpoint
// and ends with its pipeline's picture, as the other does.
TEST(BatchingTest, AnInteractiveJobPreemptsABatchMemberAndEveryJobKeepsItsBytes) {
  EmbeddedConfig c;
  c.workers = 3;  // One encode, one denoise (taking two), one decode.
  c.denoise_batch = 2;
  auto cluster = StartEmbedded(c);
  ASSERT_NE(cluster, nullptr);
  httplib::Client http("http://" + cluster->http_endpoint());
  http.set_read_timeout(120, 0);
  std::vector<std::string> bodies;
  std::vector<std::string> ids;
  for (int k = 0; k < 2; ++k) {
    const json body = BatchClassJob(k, 80);
    bodies.push_back(body.dump());
    ids.push_back(Submit(http, body));
  }
  // Both denoising (their denoise stage_started seen), then the interactive one.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (const std::string& id : ids) {
    for (;;) {
      auto j = http.Get("/v1/jobs/" + id);
      ASSERT_TRUE(j);
      const json job = json::parse(j->body);
      if (job.value("stage", "") == "denoise" && job["progress"].value("step", 0) > 0) {
        break;
      }
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "job " << id << " never denoised";
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  const json interactive = InteractiveJob();
  bodies.push_back(interactive.dump());
  ids.push_back(Submit(http, interactive));

  // The interactive job ends (its event stream with it) while both batch
  // jobs still run.
  auto events = http.Get("/v1/jobs/" + ids[2] + "/events");
  ASSERT_TRUE(events);
  for (int k = 0; k < 2; ++k) {
    auto j = http.Get("/v1/jobs/" + ids[k]);
    ASSERT_TRUE(j);
    EXPECT_NE(json::parse(j->body)["status"], "succeeded")
        << "batch job " << k << " finished before the interactive one";
  }
  int preempted = 0;
  for (std::size_t k = 0; k < ids.size(); ++k) {
    events = http.Get("/v1/jobs/" + ids[k] + "/events");  // Ends with the job.
    ASSERT_TRUE(events);
    std::istringstream lines(events->body);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("data: ", 0) == 0 && json::parse(line.substr(6))["type"] == "preempted") {
        ++preempted;
      }
    }
    auto content = http.Get("/v1/jobs/" + ids[k] + "/content");
    ASSERT_TRUE(content);
    ASSERT_EQ(content->status, 200) << content->body.substr(0, 200);
    auto got = media::DecodePng(content->body);
    auto want = media::DecodePng(Alone(bodies[k]));
    ASSERT_TRUE(got.ok() && want.ok());
    EXPECT_GE(Psnr(got->rgb, want->rgb), 40.0) << "job " << k;
  }
  EXPECT_GE(preempted, 1) << "no batch member yielded its slot to the interactive job";
}

// `interactive_alone`: on a worker batching three jobs, two batch-class
// jobs share their steps while an interactive one arriving beside them
// steps alone — none of its steps batched, and its picture its
// pipeline's byte for byte (a step alone is DenoiseStep's bits).
TEST(BatchingTest, AnInteractiveJobStepsAloneWhenTheWorkerSaysSo) {
  EmbeddedConfig c;
  c.workers = 3;  // One encode, one denoise (taking three), one decode.
  c.denoise_batch = 3;
  c.interactive_alone = true;
  auto cluster = StartEmbedded(c);
  ASSERT_NE(cluster, nullptr);
  httplib::Client http("http://" + cluster->http_endpoint());
  http.set_read_timeout(120, 0);
  std::vector<std::string> bodies, ids;
  for (int k = 0; k < 2; ++k) {
    const json body = BatchClassJob(k, 40);
    bodies.push_back(body.dump());
    ids.push_back(Submit(http, body));
  }
  const json interactive = InteractiveJob();
  bodies.push_back(interactive.dump());
  ids.push_back(Submit(http, interactive));

  int batch_jobs_batched = 0;
  for (std::size_t k = 0; k < ids.size(); ++k) {
    auto events = http.Get("/v1/jobs/" + ids[k] + "/events");  // Ends with the job.
    ASSERT_TRUE(events);
    int batched = -1;
    std::istringstream lines(events->body);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("data: ", 0) == 0 && line.find("\"stage_done\"") != std::string::npos) {
        const json e = json::parse(line.substr(6));
        if (e["stage"] == "denoise") {
          batched = e["counts"].value("steps_batched", -1);
        }
      }
    }
    auto content = http.Get("/v1/jobs/" + ids[k] + "/content");
    ASSERT_TRUE(content);
    ASSERT_EQ(content->status, 200) << content->body.substr(0, 200);
    auto got = media::DecodePng(content->body);
    auto want = media::DecodePng(Alone(bodies[k]));
    ASSERT_TRUE(got.ok() && want.ok());
    if (k == 2) {
      EXPECT_EQ(batched, 0) << "the interactive job shared a batch";
      EXPECT_TRUE(got->rgb == want->rgb) << "not its pipeline's pixels";
    } else {
      batch_jobs_batched += batched;
      EXPECT_GE(Psnr(got->rgb, want->rgb), 40.0) << "job " << k;
    }
  }
  EXPECT_GT(batch_jobs_batched, 0) << "the two batch-class jobs never shared a step";
}

}  // namespace
}  // namespace sluice::testing
