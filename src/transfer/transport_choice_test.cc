// The engine picks each op's path from the transports' capabilities and the
// peer, never by name: a same-host peer with both transports enabled is
// reached over shm, kSameHostOnly refuses a path over the network, and the
// per-transport counters say which one moved the bytes.
#include <chrono>

#include <gtest/gtest.h>

#include "sluice/transfer/engine.h"

#include "transfer/testing/engine_pair.h"

namespace sluice::testing {
namespace {

using namespace std::chrono_literals;

std::uint64_t Written(const TransferEngine& e, std::string_view name) {
  for (const TransportStats& s : e.TransportCounters()) {
    if (s.name == name) {
      return s.bytes_written;
    }
  }
  return ~std::uint64_t{0};
}

std::uint64_t Read(const TransferEngine& e, std::string_view name) {
  for (const TransportStats& s : e.TransportCounters()) {
    if (s.name == name) {
      return s.bytes_read;
    }
  }
  return ~std::uint64_t{0};
}

TEST(TransportChoiceTest, ASameHostPeerIsReachedOverTheSameHostTransportWhenBothAreEnabled) {
  EngineConfig both = ConfigFor(Mode::kShmMapped, true);
  both.transports = {"tcp", "shm"};  // Listed network first: the order is not the preference.
  auto pair = EnginePair::Make(Mode::kShmMapped, both);
  ASSERT_NE(pair, nullptr);
  RegionKey rkey;
  RegionKey lkey;
  TestBuffer remote = pair->TargetBuffer(4 << 20, Access::kRemoteReadWrite, &rkey);
  TestBuffer local = pair->LocalBuffer(4 << 20, &lkey);
  ASSERT_TRUE(pair->AwaitRemoteKey(rkey));
  local.Fill(3);
  TransferRequest w{OpKind::kWrite, local.data(), pair->segment, rkey, 0, local.size()};
  ASSERT_TRUE(pair->initiator->TransferSync({&w, 1}, 10s).ok());
  EXPECT_TRUE(remote.Holds(0, remote.size(), 3, 0));
  EXPECT_EQ(Written(*pair->initiator, "shm"), local.size());
  EXPECT_EQ(Written(*pair->initiator, "tcp"), 0u);

  w.hint = TransportHint::kSameHostOnly;
  ASSERT_TRUE(pair->initiator->TransferSync({&w, 1}, 10s).ok());
  EXPECT_EQ(Written(*pair->initiator, "shm"), 2 * local.size());

  // A key not in the table as pushed: no same-host path can check it, so
  // it goes to the target over tcp, which refuses it.
  TransferRequest r{OpKind::kRead, local.data(), pair->segment, RegionKey{rkey.value + 1}, 0, 64};
  EXPECT_FALSE(pair->initiator->TransferSync({&r, 1}, 10s).ok());
  EXPECT_EQ(Read(*pair->initiator, "tcp"), 64u);
  EXPECT_EQ(Read(*pair->initiator, "shm"), 0u);
  r.hint = TransportHint::kSameHostOnly;
  Status s = pair->initiator->TransferSync({&r, 1}, 10s);
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
}

TEST(TransportChoiceTest, ANetworkOnlyEngineCarriesEverythingOverTcpAndRefusesSameHostOnly) {
  auto pair = EnginePair::Make(Mode::kTcp);
  ASSERT_NE(pair, nullptr);
  RegionKey rkey;
  RegionKey lkey;
  TestBuffer remote = pair->TargetBuffer(1 << 20, Access::kRemoteReadWrite, &rkey);
  TestBuffer local = pair->LocalBuffer(1 << 20, &lkey);
  ASSERT_TRUE(pair->AwaitRemoteKey(rkey));
  TransferRequest w{OpKind::kWrite, local.data(), pair->segment, rkey, 0, local.size()};
  ASSERT_TRUE(pair->initiator->TransferSync({&w, 1}, 10s).ok());
  EXPECT_EQ(Written(*pair->initiator, "tcp"), local.size());
  EXPECT_EQ(Written(*pair->initiator, "shm"), ~std::uint64_t{0}) << "shm is not enabled";
  w.hint = TransportHint::kSameHostOnly;
  EXPECT_EQ(pair->initiator->Submit({&w, 1}).status().code(), StatusCode::kFailedPrecondition);
}

TEST(TransportChoiceTest, DeviceMemoryIsRefusedWhileNoTransportMovesIt) {
  auto e = TransferEngine::Create(ConfigFor(Mode::kTcp, true));
  ASSERT_TRUE(e.ok());
  char buf[4096];
  Result<RegionKey> k =
      (*e)->RegisterMemory(buf, sizeof(buf), MemoryKind::kDevice, Access::kLocalOnly);
  EXPECT_EQ(k.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(k.status().message().find("device"), std::string_view::npos) << k.status().ToString();
}

TEST(TransportChoiceTest, UnknownTransportsAreNamedAndRepeatsIgnored) {
  EngineConfig c = ConfigFor(Mode::kTcp, true);
  c.transports = {"tcp", "rdma"};
  auto bad = TransferEngine::Create(c);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'rdma'"), std::string_view::npos);
  c.transports = {};
  EXPECT_EQ(TransferEngine::Create(c).status().code(), StatusCode::kInvalidArgument);
  c.transports = {"tcp", "tcp"};
  auto twice = TransferEngine::Create(c);
  ASSERT_TRUE(twice.ok()) << twice.status().ToString();
  EXPECT_EQ((*twice)->TransportCounters().size(), 1u);
}

}  // namespace
}  // namespace sluice::testing
