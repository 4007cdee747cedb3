// Cluster mode: every role as its own `sluice` process on loopback —
// master, store node, orchestrator and one profile-stage worker per stage —
// and a client over HTTP.
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

}  // namespace
}  // namespace sluice::testing
