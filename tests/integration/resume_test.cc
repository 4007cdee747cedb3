// Edit and resume on the embedded deployment (reference stages): a job that
// keeps its checkpoints, resumed from step k unchanged (byte-identical) and
// with a changed prompt (equal to the pipeline run in one process with the
// first prompt before step k and the second from k on), and the refusals.
#include <httplib.h>

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include "sluice/serve/embedded.h"

#include "runtime/reference/pipeline.h"

namespace sluice::testing {
namespace {

using nlohmann::json;

class ResumeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EmbeddedConfig c;
    c.http_listen = "127.0.0.1:0";
    c.workers = 3;
    auto cluster = EmbeddedCluster::Start(c);
    ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
    cluster_ = std::move(*cluster);
    http_ = std::make_unique<httplib::Client>("http://" + cluster_->http_endpoint());
    http_->set_read_timeout(60, 0);
  }

  // POSTs `body` (response_format url); returns (status, job id or error
  // body, PNG bytes).
  std::tuple<int, std::string, std::string> Generate(json body) {
    body["response_format"] = "url";
    auto r = http_->Post("/v1/images/generations", body.dump(), "application/json");
    if (!r) {
      return {-1, "no answer", ""};
    }
    if (r->status != 200) {
      return {r->status, r->body, ""};
    }
    const std::string url = json::parse(r->body)["data"][0]["url"];
    const std::string path = url.substr(url.find("/v1/jobs/"));
    auto png = http_->Get(path);
    return {200, path.substr(9, path.find("/content") - 9), png ? png->body : ""};
  }

  static json Body(const std::string& prompt) {
    return {{"prompt", prompt}, {"negative_prompt", "fog"}, {"size", "64x64"}, {"steps", 6},
            {"seed", 7},        {"guidance", 4.5}};
  }

  std::unique_ptr<EmbeddedCluster> cluster_;
  std::unique_ptr<httplib::Client> http_;
};

// The reference pipeline in one process: `a`'s condition for the steps
// before `k`, `b`'s from `k` on.
std::string OneProcess(const json& a, const json& b, int k) {
  auto ra = reference::ParseRequest(a.dump(), 12, 4.0f);
  auto rb = reference::ParseRequest(b.dump(), 12, 4.0f);
  EXPECT_TRUE(ra.ok() && rb.ok());
  const std::vector<float> ca = reference::EncodeCondition(*ra);
  const std::vector<float> cb = reference::EncodeCondition(*rb);
  std::vector<float> x = reference::InitialNoise(*ra);
  for (int i = 0; i < ra->steps; ++i) {
    reference::DenoiseStep(i < k ? *ra : *rb, (i < k ? ca : cb).data(), i, x);
  }
  reference::FrameDecoder dec(*rb);
  EXPECT_TRUE(dec.AddLatentFrame(x.data(), 0).ok());
  return dec.Output();
}

TEST_F(ResumeTest, AKeptJobResumesUnchangedByteIdenticalAndEditedLikeOneProcess) {
  json keep = Body("a lighthouse");
  keep["keep_checkpoints"] = true;
  const auto [status_a, a, png_a] = Generate(keep);
  ASSERT_EQ(status_a, 200) << a;
  ASSERT_FALSE(png_a.empty());
  EXPECT_EQ(png_a, OneProcess(Body("a lighthouse"), Body("a lighthouse"), 0));

  json same = Body("a lighthouse");
  same["resume_from"] = {{"job", a}, {"step", 3}};
  const auto [status_b, b, png_b] = Generate(same);
  ASSERT_EQ(status_b, 200) << b;
  EXPECT_EQ(png_b, png_a) << "an unchanged resume is not byte-identical";

  json edited = Body("a windmill at dawn");
  edited["resume_from"] = {{"job", a}, {"step", 3}};
  const auto [status_c, c, png_c] = Generate(edited);
  ASSERT_EQ(status_c, 200) << c;
  EXPECT_NE(png_c, png_a);
  EXPECT_EQ(png_c, OneProcess(Body("a lighthouse"), Body("a windmill at dawn"), 3));

  // Resuming the edited job's own output again from the first job still works
  // (its checkpoints stayed: the resumed jobs removed none).
  const auto [status_d, d, png_d] = Generate(same);
  ASSERT_EQ(status_d, 200) << d;
  EXPECT_EQ(png_d, png_a);
}

// A step-cached job resumed unchanged picks up the cache state kept beside
// the checkpoint: its bytes are the first job's, where a cache started
// empty at that step would give others.
TEST_F(ResumeTest, AStepCachedJobResumesWithItsCacheWarm) {
  json body = {{"prompt", "a small green square at the top"},
               {"size", "128x128"},
               {"steps", 12},
               {"seed", 4},
               {"step_cache", {{"threshold", 0.3}}}};
  // In one process: the whole run, and runs whose cache starts empty at k.
  auto r = reference::ParseRequest(body.dump(), 12, 4.0f);
  ASSERT_TRUE(r.ok());
  const std::vector<float> cond = reference::EncodeCondition(*r);
  auto sample = [&](int cold_at) {
    std::vector<float> x = reference::InitialNoise(*r);
    reference::StepCache c;
    c.threshold = 0.3f;
    for (int i = 0; i < r->steps; ++i) {
      if (i == cold_at) {
        c = reference::StepCache{};
        c.threshold = 0.3f;
      }
      reference::DenoiseStep(*r, cond.data(), i, x, nullptr, nullptr, &c);
    }
    reference::FrameDecoder dec(*r);
    EXPECT_TRUE(dec.AddLatentFrame(x.data(), 0).ok());
    return dec.Output();
  };
  const std::string whole = sample(-1);
  // A step where the kept state matters: an empty cache there gives other bytes.
  int step = 1;
  while (step < r->steps && sample(step) == whole) {
    ++step;
  }
  ASSERT_LT(step, r->steps) << "no step shows the kept state";

  json keep = body;
  keep["keep_checkpoints"] = true;
  const auto [status_a, a, png_a] = Generate(keep);
  ASSERT_EQ(status_a, 200) << a;
  EXPECT_TRUE(png_a == whole) << "the served job is not the pipeline's";
  json same = body;
  same["resume_from"] = {{"job", a}, {"step", step}};
  const auto [status_b, b, png_b] = Generate(same);
  ASSERT_EQ(status_b, 200) << b;
  EXPECT_TRUE(png_b == whole) << "the job resumed at step " << step
                              << " did not start with its cache warm";
}

TEST_F(ResumeTest, MissingJobsUnkeptStepsAndMismatchedRequestsAreRefusedByName) {
  json keep = Body("a lighthouse");
  keep["keep_checkpoints"] = true;
  const auto [ok_status, a, png] = Generate(keep);
  ASSERT_EQ(ok_status, 200) << a;
  const auto [plain_status, plain, plain_png] = Generate(Body("a harbour"));
  ASSERT_EQ(plain_status, 200) << plain;

  auto refused = [&](json body, int want, const std::string& says) {
    const auto [status, error, bytes] = Generate(std::move(body));
    EXPECT_EQ(status, want) << error;
    EXPECT_NE(error.find(says), std::string::npos) << error;
  };
  json r = Body("a lighthouse");
  r["resume_from"] = {{"job", "job-0123"}, {"step", 2}};
  refused(r, 404, "resume_from: no job job-0123");
  r["resume_from"] = {{"job", a}, {"step", 6}};
  refused(r, 400, "was not kept (kept: 1, 2, 3, 4, 5)");
  r["resume_from"] = {{"job", plain}, {"step", 2}};
  refused(r, 400, "kept no checkpoints");
  r["resume_from"] = {{"job", a}, {"step", 2}};
  r["seed"] = 8;
  refused(r, 400, "resume_from: seed must be job");
  r = Body("a lighthouse");
  r["resume_from"] = {{"job", a}};
  refused(r, 400, "resume_from");
  r["resume_from"] = "job-1";
  refused(r, 400, "resume_from");
  r = Body("a lighthouse");
  r["keep_checkpoints"] = "yes";
  refused(r, 400, "keep_checkpoints");
}

}  // namespace
}  // namespace sluice::testing
