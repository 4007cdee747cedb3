// The engine picks each op's path from the transports' capabilities and the
// peer, never by name: a same-host peer with both transports enabled is
// reached over shm, kSameHostOnly refuses a path over the network, and the
// per-transport counters say which one moved the bytes. Paths are tried in
// the factory table's order of measured bandwidth.
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <span>
#include <string>

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

// The factory table's rank: with tcp, ucx and shm all reaching a
// same-host peer, shm carries a shared region's ops, ucx (faster than tcp
// over UCX's shared memory) a region only it and tcp can reach, and a key
// only the target can check goes to tcp; over UCX's tcp, the engine's tcp
// ranks first. ucx is refused with encrypt_data.
TEST(TransportChoiceTest, PathsAreTriedInTheFactoryTablesOrderOfBandwidth) {
  ::setenv("UCX_TLS", "sm", 1);
  EngineConfig all = ConfigFor(Mode::kUcxShm, true);
  all.transports = {"tcp", "ucx", "shm"};  // Listed slowest first: the order is not the rank.
  auto pair = EnginePair::Make(Mode::kUcxShm, all);
  ASSERT_NE(pair, nullptr);
  RegionKey rkey;
  RegionKey lkey;
  TestBuffer remote = pair->TargetBuffer(1 << 20, Access::kRemoteReadWrite, &rkey);
  TestBuffer local = pair->LocalBuffer(1 << 20, &lkey);
  ASSERT_TRUE(pair->AwaitRemoteKey(rkey));
  TransferRequest w{OpKind::kWrite, local.data(), pair->segment, rkey, 0, local.size()};
  ASSERT_TRUE(pair->initiator->TransferSync({&w, 1}, 10s).ok());
  // The target runs tcp and ucx, not shm: its plain memory is reached by
  // process_vm (shm needs no blob for it), ranked first.
  EXPECT_EQ(Written(*pair->initiator, "shm"), local.size());
  EXPECT_EQ(Written(*pair->initiator, "ucx"), 0u);
  EXPECT_EQ(Written(*pair->initiator, "tcp"), 0u);

  EngineConfig no_shm = ConfigFor(Mode::kUcxShm, true);
  no_shm.transports = {"tcp", "ucx"};
  auto pair2 = EnginePair::Make(Mode::kUcxShm, no_shm);
  ASSERT_NE(pair2, nullptr);
  TestBuffer remote2 = pair2->TargetBuffer(1 << 20, Access::kRemoteReadWrite, &rkey);
  TestBuffer local2 = pair2->LocalBuffer(1 << 20, &lkey);
  ASSERT_TRUE(pair2->AwaitRemoteKey(rkey));
  TransferRequest w2{OpKind::kWrite, local2.data(), pair2->segment, rkey, 0, local2.size()};
  ASSERT_TRUE(pair2->initiator->TransferSync({&w2, 1}, 10s).ok());
  EXPECT_EQ(Written(*pair2->initiator, "ucx"), local2.size());
  EXPECT_EQ(Written(*pair2->initiator, "tcp"), 0u);
  TransferRequest r{OpKind::kRead, local2.data(), pair2->segment, RegionKey{rkey.value + 1}, 0, 64};
  EXPECT_EQ(pair2->initiator->TransferSync({&r, 1}, 10s).code(), StatusCode::kNotFound);
  EXPECT_EQ(Read(*pair2->initiator, "tcp"), 64u) << "an unknown key is the target's to refuse";

  // With UCX on its tcp only, ucx (2.6 GB/s there) ranks below the
  // engine's tcp, which carries the ops.
  EngineConfig over_tcp = ConfigFor(Mode::kUcxTcp, true);
  over_tcp.transports = {"ucx", "tcp"};
  auto pair3 = EnginePair::Make(Mode::kUcxTcp, over_tcp);  // UCX_TLS=tcp.
  ASSERT_NE(pair3, nullptr);
  TestBuffer remote3 = pair3->TargetBuffer(1 << 20, Access::kRemoteReadWrite, &rkey);
  TestBuffer local3 = pair3->LocalBuffer(1 << 20, &lkey);
  ASSERT_TRUE(pair3->AwaitRemoteKey(rkey));
  TransferRequest w3{OpKind::kWrite, local3.data(), pair3->segment, rkey, 0, local3.size()};
  ASSERT_TRUE(pair3->initiator->TransferSync({&w3, 1}, 10s).ok());
  EXPECT_EQ(Written(*pair3->initiator, "tcp"), local3.size());
  EXPECT_EQ(Written(*pair3->initiator, "ucx"), 0u);

  EngineConfig sealed = ConfigFor(Mode::kTcp, true);
  sealed.secret = "a-secret-of-enough-length-0123456789";
  sealed.encrypt_data = true;
  sealed.transports = {"tcp", "ucx"};
  auto refused = TransferEngine::Create(sealed);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("encrypt_data"), std::string_view::npos)
      << refused.status().ToString();
}

// The control plane (handshake, tables, notifies) is not tcp's: a target
// running only shm still serves a tcp initiator's ops on its connections
// (tcp's served half is made on every accepted connection), delivers its
// notifies after them, and counts nothing under a transport it does not run.
TEST(TransportChoiceTest, ATargetWithoutTcpServesATcpPeersOpsAndNotifies) {
  EngineConfig tc = ConfigFor(Mode::kTcp, false);
  tc.transports = {"shm"};
  auto target = TransferEngine::Create(tc);
  auto initiator = TransferEngine::Create(ConfigFor(Mode::kTcp, true));
  ASSERT_TRUE(target.ok() && initiator.ok());
  std::mutex mu;
  std::condition_variable cv;
  std::string heard;
  (*target)->SetNotifyHandler([&](const NotifyMessage& m) {
    std::lock_guard<std::mutex> lock(mu);
    heard.assign(reinterpret_cast<const char*>(m.data.data()), m.data.size());
    cv.notify_all();
  });
  TestBuffer remote = TestBuffer::Anonymous(1 << 20);
  TestBuffer local = TestBuffer::Anonymous(1 << 20);
  auto rkey = (*target)->RegisterMemory(remote.data(), remote.size(), MemoryKind::kHost,
                                        Access::kRemoteReadWrite);
  auto lkey =
      (*initiator)
          ->RegisterMemory(local.data(), local.size(), MemoryKind::kHost, Access::kLocalOnly);
  ASSERT_TRUE(rkey.ok() && lkey.ok());
  auto seg = (*initiator)->OpenSegment((*target)->endpoint());
  ASSERT_TRUE(seg.ok()) << seg.status().ToString();
  local.Fill(9);
  TransferRequest w{OpKind::kWrite, local.data(), *seg, *rkey, 0, local.size()};
  ASSERT_TRUE((*initiator)->TransferSync({&w, 1}, 10s).ok());
  EXPECT_TRUE(remote.Holds(0, remote.size(), 9, 0));
  const std::string note = "written";
  ASSERT_TRUE((*initiator)->Notify(*seg, std::as_bytes(std::span(note))).ok());
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, 10s, [&] { return !heard.empty(); }));
    EXPECT_EQ(heard, note);
  }
  local.Zero();
  TransferRequest r{OpKind::kRead, local.data(), *seg, *rkey, 0, local.size()};
  ASSERT_TRUE((*initiator)->TransferSync({&r, 1}, 10s).ok());
  EXPECT_TRUE(local.Holds(0, local.size(), 9, 0));
  EXPECT_EQ(Written(**initiator, "tcp"), local.size());
  EXPECT_EQ(Read(**initiator, "tcp"), local.size());
  for (const TransportStats& st : (*target)->TransportCounters()) {
    EXPECT_EQ(st.name, "shm");
  }
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
