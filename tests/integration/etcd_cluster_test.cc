// Cluster mode with etcd (label etcd; a real etcd started by the test,
// skipped without /usr/bin/etcd): every role finds the master and the
// orchestrator in etcd instead of by flags; two masters and two
// orchestrators run as leader and standby; an etcd restart leaves the
// cluster serving; a killed leader's standby leads within the lease's ttl,
// workers follow a new orchestrator, which runs every job the killed one
// accepted (its journal is in etcd), and store nodes and clients a new
// master (every object put before or during the takeover reads back).
#include <httplib.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "sluice/store/client.h"
#include "sluice/transfer/engine.h"

#include "child_process.h"
#include "common/testing/eventually.h"
#include "discovery/etcd_client.h"
#include "discovery/membership.h"
#include "discovery/testing/etcd_server.h"

namespace sluice::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

class EtcdClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!discovery::testing::EtcdServer::Available()) {
      GTEST_SKIP() << "no /usr/bin/etcd (Debian's etcd-server)";
    }
    etcd_ = std::make_unique<discovery::testing::EtcdServer>();
    auto c = discovery::EtcdClient::Create({etcd_->url()}, 1000ms);
    ASSERT_TRUE(c.ok());
    client_ = std::move(*c);
  }
  // A role with --etcd (and no master or orchestrator flags); waits up to
  // `banner_ms` for its READY line.
  std::unique_ptr<ChildProcess> Role(std::vector<std::string> args, int banner_ms = 20000) {
    std::vector<std::string> argv = {SLUICE_BIN};
    argv.insert(argv.end(), args.begin(), args.end());
    for (const std::string& a : {std::string("--etcd"), etcd_->url(), std::string("--cluster"),
                                 std::string("t"), std::string("--etcd-lease-ttl-s"),
                                 std::string("4"), std::string("--exit-on-stdin-eof")}) {
      argv.push_back(a);
    }
    return std::make_unique<ChildProcess>(argv, banner_ms);
  }
  std::string Leader(const std::string& role) {
    auto kv = client_->Get("/sluice/t/" + role + "/leader");
    return kv.ok() && kv->has_value() ? (*kv)->value : "";
  }
  // One image through the orchestrator's HTTP endpoint `http_ep`.
  bool Serves(const std::string& http_ep) {
    httplib::Client http("http://" + http_ep);
    http.set_read_timeout(60, 0);
    auto r = http.Post("/v1/images/generations",
                       R"({"prompt":"a lighthouse","size":"64x64","steps":2})", "application/json");
    return r && r->status == 200 && json::parse(r->body, nullptr, false).contains("data");
  }

  std::unique_ptr<discovery::testing::EtcdServer> etcd_;
  std::unique_ptr<discovery::EtcdClient> client_;
};

TEST_F(EtcdClusterTest, RolesFindEachOtherInEtcdAndStandbysTakeOver) {
  auto master_a = Role({"master", "--metrics-port", "0"});
  ASSERT_EQ(master_a->Word(1), "master") << master_a->banner();
  auto master_b = Role({"master", "--metrics-port", "0"}, 1500);
  EXPECT_EQ(master_b->banner(), "") << "the second master stands by";
  EXPECT_EQ(Leader("master"), master_a->Word(2));
  auto node = Role({"store-node", "--memory", "64MiB"});
  ASSERT_EQ(node->Word(1), "store-node") << node->banner();
  auto orch_a = Role({"orchestrator"});
  ASSERT_EQ(orch_a->Word(1), "orchestrator") << orch_a->banner();
  auto orch_b = Role({"orchestrator"}, 1500);
  EXPECT_EQ(orch_b->banner(), "") << "the second orchestrator stands by";
  EXPECT_EQ(Leader("orchestrator"), orch_a->Word(2) + " " + orch_a->Word(3));
  std::vector<std::unique_ptr<ChildProcess>> workers;
  for (const char* stage : {"encode", "denoise", "decode"}) {
    workers.push_back(Role({"worker", "--stage", stage}));
    ASSERT_EQ(workers.back()->Word(1), "worker") << workers.back()->banner();
  }
  EXPECT_TRUE(Serves(orch_a->Word(3)));

  // etcd restarts: leaders keep their leases (renewed when it is back)
  // and the cluster serves on.
  etcd_->Kill();
  std::this_thread::sleep_for(500ms);
  ASSERT_TRUE(etcd_->Start());
  std::this_thread::sleep_for(2s);
  EXPECT_EQ(master_a->Wait(0), -1) << "the leading master still runs";
  EXPECT_EQ(orch_a->Wait(0), -1) << "the leading orchestrator still runs";
  EXPECT_TRUE(Serves(orch_a->Word(3)));

  // The leading orchestrator dies: the standby leads within the lease's
  // ttl (4 s), and the workers, told nothing, find it in etcd and serve
  // through it.
  auto killed = std::chrono::steady_clock::now();
  orch_a->Kill();
  ASSERT_TRUE(orch_b->AwaitBanner(15000));
  EXPECT_EQ(orch_b->Word(1), "orchestrator") << orch_b->banner();
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  std::printf("etcd: the standby orchestrator leads %.1f s after the leader's death\n", took);
  EXPECT_LT(took, 10);
  EXPECT_EQ(Leader("orchestrator"), orch_b->Word(2) + " " + orch_b->Word(3));
  EXPECT_TRUE(Serves(orch_b->Word(3))) << "the workers followed the new orchestrator";

  // The leading master dies: the standby leads, the store node registers
  // with it, and the workers' store clients follow it.
  killed = std::chrono::steady_clock::now();
  master_a->Kill();
  ASSERT_TRUE(master_b->AwaitBanner(15000));
  EXPECT_EQ(master_b->Word(1), "master") << master_b->banner();
  took = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  std::printf("etcd: the standby master leads %.1f s after the leader's death\n", took);
  EXPECT_LT(took, 10);
  EXPECT_EQ(Leader("master"), master_b->Word(2));
  EXPECT_TRUE(Serves(orch_b->Word(3))) << "the workers followed the new master";
}

TEST_F(EtcdClusterTest, AnOrchestratorOnEveryAddressPublishesTheHostItAdvertises) {
  // On a wildcard address without --advertise, peers could not dial what it
  // would publish: refused before it campaigns.
  auto bare =
      Role({"orchestrator", "--insecure", "--listen", "0.0.0.0:0", "--http", "0.0.0.0:0"}, 5000);
  EXPECT_EQ(bare->banner(), "");
  EXPECT_EQ(WEXITSTATUS(bare->Wait(5000)), 2);
  auto ported = Role({"orchestrator", "--insecure", "--listen", "0.0.0.0:0", "--http", "0.0.0.0:0",
                      "--advertise", "127.0.0.1:7200"},
                     5000);
  EXPECT_EQ(WEXITSTATUS(ported->Wait(5000)), 2) << "a host only: the ports are the bound ones";
  auto master = Role({"master"});
  ASSERT_EQ(master->Word(1), "master") << master->banner();
  auto orch = Role({"orchestrator", "--insecure", "--listen", "0.0.0.0:0", "--http", "0.0.0.0:0",
                    "--advertise", "127.0.0.1"});
  ASSERT_EQ(orch->Word(1), "orchestrator") << orch->banner();
  const std::string grpc_port = orch->Word(2).substr(orch->Word(2).rfind(':') + 1);
  const std::string http_port = orch->Word(3).substr(orch->Word(3).rfind(':') + 1);
  EXPECT_EQ(Leader("orchestrator"), "127.0.0.1:" + grpc_port + " 127.0.0.1:" + http_port);
}

TEST_F(EtcdClusterTest, EveryAcceptedJobFinishesAfterTheLeadingOrchestratorIsKilledUnderLoad) {
  auto master = Role({"master"});
  ASSERT_EQ(master->Word(1), "master") << master->banner();
  auto node = Role({"store-node", "--memory", "64MiB"});
  ASSERT_EQ(node->Word(1), "store-node") << node->banner();
  auto orch_a = Role({"orchestrator", "--journal-in-etcd"});
  ASSERT_EQ(orch_a->Word(1), "orchestrator") << orch_a->banner();
  auto orch_b = Role({"orchestrator", "--journal-in-etcd"}, 1500);
  EXPECT_EQ(orch_b->banner(), "") << "the second orchestrator stands by";
  std::vector<std::unique_ptr<ChildProcess>> workers;
  for (const char* stage : {"encode", "denoise", "decode"}) {
    workers.push_back(Role({"worker", "--stage", stage}));
    ASSERT_EQ(workers.back()->Word(1), "worker") << workers.back()->banner();
  }
  // The leader's HTTP endpoint, as etcd says now.
  auto leader_http = [&] {
    const std::string v = Leader("orchestrator");
    const std::size_t sp = v.find(' ');
    return sp == std::string::npos ? std::string() : v.substr(sp + 1);
  };
  // A client submits asynchronous jobs to whichever orchestrator leads, at
  // most 40 or for 60 s; a job counts once an orchestrator accepted it.
  std::atomic<bool> stop{false};
  std::atomic<int> accepted_n{0};
  std::mutex accepted_mu;
  std::vector<std::string> accepted;  // Under accepted_mu until the client is joined.
  std::thread client([&] {
    const auto until = std::chrono::steady_clock::now() + 60s;
    for (int i = 0;
         accepted_n.load() < 40 && !stop.load() && std::chrono::steady_clock::now() < until; ++i) {
      httplib::Client http("http://" + leader_http());
      http.set_connection_timeout(1, 0);
      http.set_read_timeout(5, 0);
      const json body = {{"prompt", "harbour " + std::to_string(i)},
                         {"size", "64x64"},
                         {"steps", 24},
                         {"seed", i},
                         {"async", true}};
      auto r = http.Post("/v1/images/generations", body.dump(), "application/json");
      const json j = r ? json::parse(r->body, nullptr, false) : json();
      if (r && r->status / 100 == 2 && j.is_object() && j.contains("id")) {
        std::lock_guard<std::mutex> lock(accepted_mu);
        accepted.push_back(j["id"].get<std::string>());
        accepted_n = static_cast<int>(accepted.size());
      }
      std::this_thread::sleep_for(20ms);
    }
  });
  ASSERT_TRUE(internal::Eventually([&] { return accepted_n.load() >= 8; }, 30s));
  // Jobs the leader has not finished when it dies (at least one, or the
  // test would not test the journal).
  int unfinished_at_kill = 0;
  {
    httplib::Client a("http://" + orch_a->Word(3));
    a.set_read_timeout(5, 0);
    std::vector<std::string> so_far;
    {
      std::lock_guard<std::mutex> lock(accepted_mu);
      so_far = accepted;
    }
    for (const std::string& id : so_far) {
      auto r = a.Get("/v1/jobs/" + id);
      const json j = r ? json::parse(r->body, nullptr, false) : json();
      unfinished_at_kill += j.is_object() && j.value("status", "") != "succeeded" ? 1 : 0;
    }
  }
  orch_a->Kill();
  ASSERT_TRUE(orch_b->AwaitBanner(15000));
  ASSERT_EQ(orch_b->Word(1), "orchestrator") << orch_b->banner();
  const int at_takeover = accepted_n.load();
  EXPECT_TRUE(internal::Eventually([&] { return accepted_n.load() >= at_takeover + 8; }, 30s))
      << "submissions go on through the new leader";
  stop = true;
  client.join();

  // Every accepted job finishes, and the new leader answers for each, with
  // its image, whichever orchestrator accepted or finished it.
  httplib::Client http("http://" + orch_b->Word(3));
  http.set_read_timeout(10, 0);
  int succeeded = 0;
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  for (const std::string& id : accepted) {
    json j;
    while (std::chrono::steady_clock::now() < deadline) {
      auto r = http.Get("/v1/jobs/" + id);
      j = r && r->status == 200 ? json::parse(r->body, nullptr, false) : json();
      const std::string status = j.is_object() ? j.value("status", "") : "";
      if (status == "succeeded" || status == "failed" || status == "cancelled") {
        break;
      }
      std::this_thread::sleep_for(100ms);
    }
    if (!j.is_object() || j.value("status", "") != "succeeded") {
      ADD_FAILURE() << id << ": " << (j.is_object() ? j.dump() : "unknown to the new leader");
      continue;
    }
    auto content = http.Get("/v1/jobs/" + id + "/content");
    if (!content || content->status != 200 || content->body.rfind("\x89PNG", 0) != 0) {
      ADD_FAILURE() << id << ": no image (" << (content ? content->status : -1) << ")";
      continue;
    }
    ++succeeded;
  }
  std::printf(
      "etcd: %zu jobs accepted (%d before the takeover, %d of them unfinished), %d "
      "succeeded\n",
      accepted.size(), at_takeover, unfinished_at_kill, succeeded);
  EXPECT_GT(unfinished_at_kill, 0) << "the killed leader had work in hand";
  EXPECT_EQ(succeeded, static_cast<int>(accepted.size()));
}

// Bytes of object `i` (its size varies from 4 KiB to 260 KiB).
std::vector<std::byte> ObjectBytes(int i) {
  std::vector<std::byte> b(4096 + static_cast<std::size_t>(i % 17) * 16384);
  for (std::size_t k = 0; k < b.size(); ++k) {
    b[k] = static_cast<std::byte>((k * 131 + static_cast<std::size_t>(i) * 7) & 0xff);
  }
  return b;
}

TEST_F(EtcdClusterTest, EveryObjectIsReadableThroughANewMasterAfterALeaderIsKilledUnderLoad) {
  auto master_a = Role({"master", "--metrics-port", "0"});
  ASSERT_EQ(master_a->Word(1), "master") << master_a->banner();
  auto master_b = Role({"master", "--metrics-port", "0"}, 1500);
  EXPECT_EQ(master_b->banner(), "") << "the second master stands by";
  auto node = Role({"store-node", "--memory", "64MiB"});
  ASSERT_EQ(node->Word(1), "store-node") << node->banner();

  auto engine = TransferEngine::Create(EngineConfig{});
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  StoreClientConfig sc;
  sc.master = master_a->Word(2);
  sc.staging_bytes = std::size_t{4} << 20;
  sc.resolve_master = [this] {
    auto v = discovery::Resolve(client_.get(), "/sluice/t/master/leader", 500ms);
    return v.ok() ? v->substr(0, v->find(' ')) : std::string();
  };
  auto store = StoreClient::Create(engine->get(), sc);
  ASSERT_TRUE(store.ok()) << store.status().ToString();

  // A writer puts pipeline payloads (delete-on-consume) back to back, for
  // at most 600 puts or 40 s; a put it saw acknowledged must survive.
  std::atomic<bool> stop{false};
  std::atomic<int> acked{0};
  std::vector<std::string> errors;
  std::thread writer([&] {
    const auto until = std::chrono::steady_clock::now() + 40s;
    for (int i = 0; i < 600 && !stop.load() && std::chrono::steady_clock::now() < until; ++i) {
      PutOptions o;
      o.policy = LeasePolicy::DeleteOnConsume(1);
      const std::vector<std::byte> b = ObjectBytes(i);
      if (Status s = (*store)->Put("obj-" + std::to_string(i), b, o); s.ok()) {
        acked = i + 1;  // Puts are sequential: every earlier one was acknowledged or failed.
      } else {
        errors.push_back("obj-" + std::to_string(i) + ": " + s.ToString());
        acked = i + 1;
      }
      std::this_thread::sleep_for(5ms);
    }
  });
  ASSERT_TRUE(internal::Eventually([&] { return acked.load() >= 30; }, 20s));
  const auto killed = std::chrono::steady_clock::now();
  master_a->Kill();
  ASSERT_TRUE(master_b->AwaitBanner(15000));
  const int at_takeover = acked.load();
  // Writes go on through the new master.
  EXPECT_TRUE(internal::Eventually([&] { return acked.load() >= at_takeover + 30; }, 30s));
  stop = true;
  writer.join();
  std::printf("etcd: %d puts, %zu failed, the standby master leading %.1f s after the kill\n",
              acked.load(), errors.size(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count());
  for (const std::string& e : errors) {
    ADD_FAILURE() << "put failed across the takeover: " << e;
  }
  int readable = 0;
  for (int i = 0; i < acked.load(); ++i) {
    const std::string key = "obj-" + std::to_string(i);
    Result<std::vector<std::byte>> got = (*store)->Get(key);
    if (!got.ok()) {
      ADD_FAILURE() << key << ": " << got.status().ToString();
    } else if (*got != ObjectBytes(i)) {
      ADD_FAILURE() << key << ": wrong bytes";
    } else {
      ++readable;
    }
  }
  EXPECT_EQ(readable, acked.load())
      << "every acknowledged object reads back through the new master";
}

}  // namespace
}  // namespace sluice::testing
