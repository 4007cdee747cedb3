// For connector tests in one process: an embedded master and a 64 MiB
// store node, and a producer and a consumer connector on them.
#ifndef SLUICE_CONNECTOR_TESTING_CONNECTOR_FIXTURE_H_
#define SLUICE_CONNECTOR_TESTING_CONNECTOR_FIXTURE_H_

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "sluice/connector/connector.h"
#include "sluice/store/master.h"
#include "sluice/store/store_node.h"

namespace sluice::testing {

class ConnectorTest : public ::testing::Test {
 public:
  void SetUp() override {
    MasterConfig mc;
    auto m = MasterServer::Start(mc);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    master_ = std::move(*m);
    auto e = TransferEngine::Create(EngineConfig{});
    ASSERT_TRUE(e.ok());
    node_engine_ = std::move(*e);
    StoreNodeConfig nc;
    nc.master = master_->endpoint();
    nc.memory_bytes = 64 << 20;
    auto n = StoreNode::Start(node_engine_.get(), nc);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    node_ = std::move(*n);
    while (!node_->registered()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    producer_ = Make("denoise");
    consumer_ = Make("decode");
  }
  // A connector on the fixture's store; `device` names its engine's device
  // backend ("" for none).
  std::unique_ptr<DiffusionConnector> Make(const std::string& role,
                                           const std::string& device = "") {
    ConnectorConfig c;
    c.role = role;
    c.engine.device = device;
    c.store.master = master_->endpoint();
    c.consume_timeout = std::chrono::seconds(5);
    auto conn = DiffusionConnector::Create(c);
    EXPECT_TRUE(conn.ok()) << conn.status().ToString();
    return std::move(*conn);
  }

  std::unique_ptr<MasterServer> master_;
  std::unique_ptr<TransferEngine> node_engine_;
  std::unique_ptr<StoreNode> node_;
  std::unique_ptr<DiffusionConnector> producer_;
  std::unique_ptr<DiffusionConnector> consumer_;
};

}  // namespace sluice::testing

#endif  // SLUICE_CONNECTOR_TESTING_CONNECTOR_FIXTURE_H_
