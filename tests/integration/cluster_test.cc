// Cluster mode: every role as its own `sluice` process on loopback —
// master, store node, orchestrator and one profile-stage worker per stage —
// and a client over HTTP; the same with the profile condition cache.
#include <httplib.h>

#include <nlohmann/json.hpp>
#include <thread>

#include <gtest/gtest.h>

#include "child_process.h"
#include "metrics_text.h"

namespace sluice::testing {
namespace {

using nlohmann::json;

TEST(ClusterTest, EveryRoleAsItsOwnProcessServesAnImageRequest) {
  ChildProcess master({SLUICE_BIN, "master", "--listen", "127.0.0.1:0", "--exit-on-stdin-eof"});
  ASSERT_EQ(master.Word(1), "master") << master.banner();
  ChildProcess node({SLUICE_BIN, "store-node", "--master", master.Word(2), "--memory", "256MiB",
                     "--exit-on-stdin-eof"});
  ASSERT_EQ(node.Word(1), "store-node") << node.banner();
  ChildProcess orch(
      {SLUICE_BIN, "orchestrator", "--store-master", master.Word(2), "--exit-on-stdin-eof"});
  ASSERT_EQ(orch.Word(1), "orchestrator") << orch.banner();
  std::vector<std::unique_ptr<ChildProcess>> workers;
  for (const char* stage : {"encode", "denoise", "decode"}) {
    workers.push_back(std::make_unique<ChildProcess>(std::vector<std::string>{
        SLUICE_BIN, "worker", "--stage", stage, "--orchestrator", orch.Word(2), "--master",
        master.Word(2), "--profile", "flux-1024", "--time-factor", "0.01", "--exit-on-stdin-eof"}));
    ASSERT_EQ(workers.back()->Word(1), "worker") << workers.back()->banner();
  }
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
  // Each worker's next heartbeat brings its counters (every 200 ms).
  for (int i = 0;
       i < 50 && (bytes("encode", "shm", "write") <= 0 || bytes("denoise", "shm", "read") <= 0 ||
                  bytes("decode", "shm", "read") <= 0);
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_GT(bytes("encode", "shm", "write"), 0);
  EXPECT_GT(bytes("denoise", "shm", "read"), 0);
  EXPECT_GT(bytes("decode", "shm", "read"), 0);
  EXPECT_EQ(bytes("decode", "tcp", "read"), 0);
}

// Profile workers with the condition cache asked for (`--condition-cache`
// on the encode worker): the second job with the same texts skips encode
// (its denoise reads the cached stand-in embeddings), and with the encode
// worker gone a third still completes.
TEST(ClusterTest, ProfileWorkersCacheConditionsWhenAskedAndCachedJobsSkipEncode) {
  ChildProcess master({SLUICE_BIN, "master", "--listen", "127.0.0.1:0", "--exit-on-stdin-eof"});
  ASSERT_EQ(master.Word(1), "master") << master.banner();
  ChildProcess node({SLUICE_BIN, "store-node", "--master", master.Word(2), "--memory", "256MiB",
                     "--exit-on-stdin-eof"});
  ASSERT_EQ(node.Word(1), "store-node") << node.banner();
  ChildProcess orch(
      {SLUICE_BIN, "orchestrator", "--store-master", master.Word(2), "--exit-on-stdin-eof"});
  ASSERT_EQ(orch.Word(1), "orchestrator") << orch.banner();
  std::vector<std::unique_ptr<ChildProcess>> workers;
  for (const char* stage : {"encode", "denoise", "decode"}) {
    std::vector<std::string> argv = {
        SLUICE_BIN,           "worker",     "--stage",       stage,
        "--orchestrator",     orch.Word(2), "--master",      master.Word(2),
        "--profile",          "flux-1024",  "--time-factor", "0.01",
        "--exit-on-stdin-eof"};
    if (std::string(stage) == "encode") {
      argv.push_back("--condition-cache");
    }
    workers.push_back(std::make_unique<ChildProcess>(argv));
    ASSERT_EQ(workers.back()->Word(1), "worker") << workers.back()->banner();
  }
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
  workers.front()->Kill();  // No encode worker left: a cached job still completes.
  EXPECT_FALSE(generate().empty());
  EXPECT_EQ(MetricValue(orch.Word(3), "sluice_orchestrator_cache_skips_total"), 2);
}

}  // namespace
}  // namespace sluice::testing
