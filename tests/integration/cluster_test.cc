// Cluster mode: every role as its own `sluice` process on loopback —
// master, store node, orchestrator and one profile-stage worker per stage —
// and a client over HTTP; the same with the profile condition cache.
#include <httplib.h>

#include <nlohmann/json.hpp>
#include <thread>

#include <gtest/gtest.h>

#include "sluice/runtime/model_profiles.h"

#include "child_process.h"
#include "metrics_text.h"

namespace sluice::testing {
namespace {

using nlohmann::json;

// Every role of a cluster on loopback as its own process: master, store
// node, orchestrator, and one flux-1024 profile worker per stage
// (`encode_flags` added to the encode worker's).
class ProfileCluster {
 public:
  void Start(const std::vector<std::string>& encode_flags = {}) {
    master_ = std::make_unique<ChildProcess>(std::vector<std::string>{
        SLUICE_BIN, "master", "--listen", "127.0.0.1:0", "--exit-on-stdin-eof"});
    ASSERT_EQ(master_->Word(1), "master") << master_->banner();
    node_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{SLUICE_BIN, "store-node", "--master", master_->Word(2), "--memory",
                                 "256MiB", "--exit-on-stdin-eof"});
    ASSERT_EQ(node_->Word(1), "store-node") << node_->banner();
    orch_ = std::make_unique<ChildProcess>(std::vector<std::string>{
        SLUICE_BIN, "orchestrator", "--store-master", master_->Word(2), "--exit-on-stdin-eof"});
    ASSERT_EQ(orch_->Word(1), "orchestrator") << orch_->banner();
    for (const std::string stage : {"encode", "denoise", "decode"}) {
      std::vector<std::string> argv = {
          SLUICE_BIN,           "worker",       "--stage",       stage,
          "--orchestrator",     orch_->Word(2), "--master",      master_->Word(2),
          "--profile",          "flux-1024",    "--time-factor", "0.01",
          "--exit-on-stdin-eof"};
      if (stage == "encode") {
        argv.insert(argv.end(), encode_flags.begin(), encode_flags.end());
      }
      workers_.push_back(std::make_unique<ChildProcess>(argv));
      ASSERT_EQ(workers_.back()->Word(1), "worker") << workers_.back()->banner();
    }
  }
  ChildProcess& orch() { return *orch_; }
  ChildProcess& worker(int i) { return *workers_[static_cast<std::size_t>(i)]; }

 private:
  std::unique_ptr<ChildProcess> master_, node_, orch_;
  std::vector<std::unique_ptr<ChildProcess>> workers_;
};

TEST(ClusterTest, EveryRoleAsItsOwnProcessServesAnImageRequest) {
  ProfileCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.Start());
  ChildProcess& orch = cluster.orch();
  httplib::Client http("http://" + orch.Word(3));
  http.set_read_timeout(60, 0);
  auto r =
      http.Post("/v1/images/generations",
                R"({"prompt":"a lighthouse","steps":8,"model":"flux-1024"})", "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  // 1024 x 1024 RGB pixels encoded at 3:1, base64: 4 characters per 3 bytes.
  EXPECT_EQ(j["data"][0]["b64_json"].get<std::string>().size(), (1024u * 1024 + 2) / 3 * 4);
  auto m = http.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("sluice_orchestrator_jobs_succeeded_total 1"), std::string::npos);
  // Where the payloads went, as the workers' heartbeats report it: every
  // role on one host, so through shared memory and never over tcp.
  auto bytes = [&](const char* stage, const char* transport, const char* direction) {
    return MetricValue(orch.Word(3), std::string("sluice_worker_transfer_bytes_total{stage=\"") +
                                         stage + "\",transport=\"" + transport + "\",direction=\"" +
                                         direction + "\"}");
  };
  // The profile's payloads, bf16: the condition E -> D, the latent D -> V.
  Result<ModelProfile> profile = FindModelProfile("flux-1024");
  ASSERT_TRUE(profile.ok());
  const auto bf16_bytes = [](const std::vector<std::int64_t>& shape) {
    double n = 2;
    for (std::int64_t d : shape) {
      n *= static_cast<double>(d);
    }
    return n;
  };
  const double condition = bf16_bytes(profile->condition_shape);
  const double latent = bf16_bytes(profile->latent_shape);
  // Each worker's next heartbeat brings its counters (every 200 ms).
  for (int i = 0; i < 50 && (bytes("encode", "shm", "write") < condition ||
                             bytes("denoise", "shm", "read") < condition ||
                             bytes("denoise", "shm", "write") < latent ||
                             bytes("decode", "shm", "read") < latent);
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(bytes("encode", "shm", "write"), condition);
  EXPECT_EQ(bytes("denoise", "shm", "read"), condition);
  EXPECT_EQ(bytes("denoise", "shm", "write"), latent);
  EXPECT_EQ(bytes("decode", "shm", "read"), latent);
  EXPECT_EQ(bytes("decode", "tcp", "read"), 0);
}

// Profile workers with the condition cache asked for (`--condition-cache`
// on the encode worker): the second job with the same texts skips encode
// (its denoise reads the cached stand-in embeddings), and with the encode
// worker gone a third still completes.
TEST(ClusterTest, ProfileWorkersCacheConditionsWhenAskedAndCachedJobsSkipEncode) {
  ProfileCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.Start({"--condition-cache"}));
  ChildProcess& orch = cluster.orch();
  httplib::Client http("http://" + orch.Word(3));
  http.set_read_timeout(60, 0);
  const std::string body =
      R"({"prompt":"a lighthouse","negative_prompt":"blurry","steps":4,"model":"flux-1024",)"
      R"("size":"64x64","response_format":"url"})";
  // Runs one job; its id (from its result's URL), or empty.
  auto generate = [&]() -> std::string {
    auto r = http.Post("/v1/images/generations", body, "application/json");
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
    if (!r || r->status != 200) {
      return "";
    }
    const std::string url = json::parse(r->body)["data"][0]["url"];
    const std::size_t at = url.find("/v1/jobs/") + 9;
    return url.substr(at, url.find("/content") - at);
  };
  auto events = [&](const std::string& id) {
    auto r = http.Get("/v1/jobs/" + id + "/events");
    return r ? r->body : "";
  };
  const std::string a = generate();
  ASSERT_FALSE(a.empty());
  EXPECT_NE(events(a).find("\"stage\":\"encode\""), std::string::npos) << events(a);
  const std::string b = generate();
  ASSERT_FALSE(b.empty());
  EXPECT_NE(events(b).find("cache_hit"), std::string::npos) << events(b);
  EXPECT_EQ(events(b).find("\"stage\":\"encode\""), std::string::npos)
      << "encode ran for a cached job: " << events(b);
  cluster.worker(0).Kill();  // No encode worker left: a cached job still completes.
  EXPECT_FALSE(generate().empty());
  EXPECT_EQ(MetricValue(orch.Word(3), "sluice_orchestrator_cache_skips_total"), 2);
}

}  // namespace
}  // namespace sluice::testing
