// The store test fixture: a master and two store nodes as `sluice` child
// processes on loopback, and a client in this process.
#ifndef SLUICE_TESTS_INTEGRATION_STORE_FIXTURE_H_
#define SLUICE_TESTS_INTEGRATION_STORE_FIXTURE_H_

#include <httplib.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

#include "sluice/store/client.h"

#include "child_process.h"
#include "common/testing/free_port.h"
#include "metrics_text.h"
#include "transfer/testing/engine_pair.h"

namespace sluice::testing {

using namespace std::chrono_literals;
inline constexpr std::size_t kMiB = 1 << 20;

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A port restarts can take again (see FreeLoopbackPort).
    StartMaster(internal::FreeLoopbackEndpoint());
    ASSERT_EQ(master_->Word(1), "master") << master_->banner();
    master_ep_ = master_->Word(2);
    for (int i = 0; i < 2; ++i) {
      nodes_.push_back(StartNode(i));
      ASSERT_EQ(nodes_.back()->Word(1), "store-node") << nodes_.back()->banner();
    }
    engine_ = MakeEngine({"tcp", "shm"});
    client_ = MakeClient(*engine_);
    // Wait until both nodes are registered. (Not by putting probes: a
    // repeated probe put would leave a reservation that changes where the
    // test's objects go.)
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (MetricValue(master_->Word(3), "sluice_store_nodes") != 2 &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(20ms);
    }
    ASSERT_EQ(MetricValue(master_->Word(3), "sluice_store_nodes"), 2);
  }

  // Store node `i` ("node<i>") of this fixture's master.
  std::unique_ptr<ChildProcess> StartNode(int i) {
    std::vector<std::string> args = {
        SLUICE_BIN,           "store-node", "--master",  master_ep_,
        "--memory",           NodeMemory(), "--node-id", "node" + std::to_string(i),
        "--exit-on-stdin-eof"};
    for (const std::string& a : NodeExtraArgs()) {
      args.push_back(a);
    }
    return std::make_unique<ChildProcess>(args);
  }

  virtual std::string NodeMemory() const { return "320MiB"; }
  virtual std::vector<std::string> NodeExtraArgs() { return {}; }

  virtual std::vector<std::string> MasterExtraArgs() { return {}; }
  void StartMaster(const std::string& listen) {
    std::vector<std::string> args = {SLUICE_BIN,       "master", "--listen",           listen,
                                     "--metrics-port", "0",      "--exit-on-stdin-eof"};
    for (const std::string& a : MasterExtraArgs()) {
      args.push_back(a);
    }
    master_ = std::make_unique<ChildProcess>(args);
  }

  static std::unique_ptr<TransferEngine> MakeEngine(std::vector<std::string> transports) {
    EngineConfig c;
    c.transports = std::move(transports);
    auto e = TransferEngine::Create(c);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return std::move(*e);
  }
  std::unique_ptr<StoreClient> MakeClient(TransferEngine& engine, bool fast_lane = true,
                                          std::chrono::milliseconds master_retry = 30s) {
    StoreClientConfig c;
    c.master = master_ep_;
    c.fast_lane = fast_lane;
    c.master_retry = master_retry;
    c.staging_bytes = 8 * kMiB;
    auto cl = StoreClient::Create(&engine, c);
    EXPECT_TRUE(cl.ok()) << cl.status().ToString();
    return std::move(*cl);
  }
  // A registered, pre-faulted buffer on `engine`.
  TestBuffer Registered(TransferEngine& engine, std::size_t size) {
    TestBuffer b = TestBuffer::Anonymous(size);
    EXPECT_TRUE(engine.RegisterMemory(b.data(), size, MemoryKind::kHost, Access::kLocalOnly).ok());
    return b;
  }

  // True once every store node acknowledged every directory change (what a
  // restarted master learns back from the nodes), within 10 s.
  bool NodesKnowEveryChange() {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < deadline) {
      if (MetricValue(master_->Word(3), "sluice_store_unacked_changes") == 0) {
        return true;
      }
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }

  // True once `n` calls are parked at the master waiting for a key to be
  // put (WaitFor, gets with a wait), within 10 s: a producer put after it
  // comes after the waiter for sure.
  bool WaitersParked(int n) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < deadline) {
      if (MetricValue(master_->Word(3), "sluice_store_waiters") == n) {
        return true;
      }
      std::this_thread::sleep_for(5ms);
    }
    return false;
  }

  // True once `key` no longer exists (bounded wait).
  static bool EventuallyGone(StoreClient& c, const std::string& key) {
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (std::chrono::steady_clock::now() < deadline) {
      Result<bool> e = c.Exists(key);
      if (e.ok() && !*e) {
        return true;
      }
      std::this_thread::sleep_for(5ms);
    }
    return false;
  }

  std::unique_ptr<ChildProcess> master_;
  std::string master_ep_;
  std::vector<std::unique_ptr<ChildProcess>> nodes_;
  std::unique_ptr<TransferEngine> engine_;
  std::unique_ptr<StoreClient> client_;
};

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_INTEGRATION_STORE_FIXTURE_H_
