// The conformance suite every transport passes. A new transport adds a Mode
// to INSTANTIATE_TEST_SUITE_P.
#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

#include "common/mutex.h"
#include "transfer/testing/engine_pair.h"

namespace sluice::testing {
namespace {

using namespace std::chrono_literals;

class TransferConformanceTest : public ::testing::TestWithParam<Mode> {
 protected:
  void SetUp() override {
    pair_ = EnginePair::Make(GetParam());
    ASSERT_NE(pair_, nullptr);
  }

  TransferRequest Op(OpKind kind, char* local, RegionKey key, std::uint64_t remote_offset,
                     std::uint64_t len) const {
    TransferRequest r;
    r.kind = kind;
    r.local = local;
    r.segment = pair_->segment;
    r.remote_key = key;
    r.remote_offset = remote_offset;
    r.length = len;
    return r;
  }

  Status Run(std::vector<TransferRequest> ops) { return pair_->initiator->TransferSync(ops, 60s); }

  std::unique_ptr<EnginePair> pair_;
};

TEST_P(TransferConformanceTest, WriteThenReadBackFromOneByteTo256MiB) {
  constexpr std::size_t kMax = std::size_t{256} << 20;
  RegionKey rkey, lkey;
  TestBuffer remote = pair_->TargetBuffer(kMax, Access::kRemoteReadWrite, &rkey);
  TestBuffer local = pair_->LocalBuffer(kMax, &lkey);
  for (std::size_t len : {std::size_t{1}, std::size_t{7}, std::size_t{4096},
                          (std::size_t{1} << 20) + 3, (std::size_t{16} << 20) + 1, kMax}) {
    SCOPED_TRACE("length " + std::to_string(len));
    const std::uint64_t seed = len;
    for (std::size_t i = 0; i < len; ++i) {
      local.data()[i] = PatternByte(seed, i);
    }
    ASSERT_TRUE(Run({Op(OpKind::kWrite, local.data(), rkey, 0, len)}).ok());
    ASSERT_TRUE(remote.Holds(0, len, seed, 0));
    std::memset(local.data(), 0, len);
    Status s = Run({Op(OpKind::kRead, local.data(), rkey, 0, len)});
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_TRUE(local.Holds(0, len, seed, 0));
  }
}

TEST_P(TransferConformanceTest, UnalignedOffsetsOnBothSides) {
  RegionKey rkey, lkey;
  TestBuffer remote = pair_->TargetBuffer(8 << 20, Access::kRemoteReadWrite, &rkey);
  TestBuffer local = pair_->LocalBuffer(8 << 20, &lkey);
  local.Fill(3);
  std::memset(remote.data(), 0, remote.size());
  const std::size_t len = (3 << 20) + 17;
  ASSERT_TRUE(Run({Op(OpKind::kWrite, local.data() + 3, rkey, 5, len)}).ok());
  EXPECT_EQ(remote.data()[4], 0) << "byte before the op was touched";
  EXPECT_TRUE(remote.Holds(5, len, 3, 3));
  EXPECT_EQ(remote.data()[5 + len], 0) << "byte after the op was touched";
  std::memset(local.data(), 0, local.size());
  ASSERT_TRUE(Run({Op(OpKind::kRead, local.data() + 11, rkey, 5, len)}).ok());
  EXPECT_TRUE(local.Holds(11, len, 3, 3));
}

TEST_P(TransferConformanceTest, MixedReadsAndWritesInOneBatch) {
  RegionKey rkey, lkey;
  TestBuffer remote = pair_->TargetBuffer(4 << 20, Access::kRemoteReadWrite, &rkey);
  TestBuffer local = pair_->LocalBuffer(4 << 20, &lkey);
  remote.Fill(1);  // Upper half is read back; lower half is overwritten.
  local.Fill(2);
  const std::size_t half = 2 << 20;
  std::vector<TransferRequest> ops;
  for (std::size_t i = 0; i < 8; ++i) {
    const std::size_t chunk = half / 8;
    ops.push_back(Op(OpKind::kWrite, local.data() + i * chunk, rkey, i * chunk, chunk));
    ops.push_back(
        Op(OpKind::kRead, local.data() + half + i * chunk, rkey, half + i * chunk, chunk));
  }
  ASSERT_TRUE(Run(ops).ok());
  EXPECT_TRUE(remote.Holds(0, half, 2, 0));
  EXPECT_TRUE(local.Holds(half, half, 1, half));
}

TEST_P(TransferConformanceTest, ConcurrentBatchesFromSeveralThreads) {
  constexpr int kThreads = 4;
  constexpr std::size_t kPerThread = 4 << 20;
  RegionKey rkey, lkey;
  TestBuffer remote = pair_->TargetBuffer(kThreads * kPerThread, Access::kRemoteReadWrite, &rkey);
  TestBuffer local = pair_->LocalBuffer(kThreads * kPerThread, &lkey);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      char* mine = local.data() + t * kPerThread;
      const std::uint64_t base = t * kPerThread;
      for (int iter = 0; iter < 30; ++iter) {
        std::vector<TransferRequest> ops;
        std::uint64_t off = 0;
        for (int k = 0; k < 8; ++k) {
          const std::uint64_t len = 1 + rng() % (kPerThread / 16);
          ops.push_back(Op(iter % 2 == 0 ? OpKind::kWrite : OpKind::kRead, mine + off, rkey,
                           base + off, len));
          off += len;
        }
        auto b = pair_->initiator->Submit(ops);
        if (!b.ok() || !(*b)->Wait(30s).ok()) {
          failures.fetch_add(1);
        }
      }
    });
  }
  for (auto& th : threads) {
    th.join();
  }
  EXPECT_EQ(failures.load(), 0);
}

TEST_P(TransferConformanceTest, OutOfBoundsOpIsRejectedAndMemoryUntouched) {
  RegionKey rkey, lkey;
  TestBuffer remote = pair_->TargetBuffer(1 << 20, Access::kRemoteReadWrite, &rkey);
  TestBuffer local = pair_->LocalBuffer(2 << 20, &lkey);
  std::memset(remote.data(), 0, remote.size());
  local.Fill(9);
  Status s = Run({Op(OpKind::kWrite, local.data(), rkey, (1 << 20) - 10, 20)});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_EQ(s.scope(), FailureScope::kRequest);
  EXPECT_EQ(remote.data()[(1 << 20) - 1], 0);
  s = Run({Op(OpKind::kRead, local.data(), rkey, 0, (1 << 20) + 1)});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  // The engine keeps working after rejections.
  EXPECT_TRUE(Run({Op(OpKind::kWrite, local.data(), rkey, 0, 1 << 20)}).ok());
}

TEST_P(TransferConformanceTest, UnknownKeyIsRejected) {
  RegionKey rkey, lkey;
  TestBuffer remote = pair_->TargetBuffer(1 << 16, Access::kRemoteReadWrite, &rkey);
  TestBuffer local = pair_->LocalBuffer(1 << 16, &lkey);
  Status s = Run({Op(OpKind::kWrite, local.data(), RegionKey{rkey.value ^ 0x5a5a}, 0, 64)});
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
}

TEST_P(TransferConformanceTest, AccessBitsAreEnforced) {
  RegionKey ro, wo, lkey;
  TestBuffer read_only = pair_->TargetBuffer(1 << 16, Access::kRemoteRead, &ro);
  TestBuffer write_only = pair_->TargetBuffer(1 << 16, Access::kRemoteWrite, &wo);
  TestBuffer local = pair_->LocalBuffer(1 << 16, &lkey);
  EXPECT_EQ(Run({Op(OpKind::kWrite, local.data(), ro, 0, 64)}).code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(Run({Op(OpKind::kRead, local.data(), wo, 0, 64)}).code(),
            StatusCode::kPermissionDenied);
  EXPECT_TRUE(Run({Op(OpKind::kRead, local.data(), ro, 0, 64)}).ok());
  EXPECT_TRUE(Run({Op(OpKind::kWrite, local.data(), wo, 0, 64)}).ok());
}

TEST_P(TransferConformanceTest, UnregisterWhileInFlightFailsThenSucceeds) {
  constexpr std::size_t kLen = std::size_t{128} << 20;
  RegionKey rkey, lkey;
  TestBuffer remote = pair_->TargetBuffer(kLen, Access::kRemoteReadWrite, &rkey);
  TestBuffer local = pair_->LocalBuffer(kLen, &lkey);
  std::vector<TransferRequest> ops;
  for (std::size_t off = 0; off < kLen; off += 4 << 20) {
    ops.push_back(Op(OpKind::kWrite, local.data() + off, rkey, off, 4 << 20));
  }
  auto batch = pair_->initiator->Submit(ops);
  ASSERT_TRUE(batch.ok());
  Status early = pair_->initiator->UnregisterMemory(lkey);
  if (early.ok()) {
    EXPECT_TRUE((*batch)->done()) << "unregistered memory that an op still used";
    GTEST_SKIP() << "batch finished before the unregister call";
  }
  EXPECT_EQ(early.code(), StatusCode::kFailedPrecondition) << early.ToString();
  ASSERT_TRUE((*batch)->Wait(60s).ok());
  EXPECT_TRUE(pair_->initiator->UnregisterMemory(lkey).ok());
  EXPECT_EQ(pair_->initiator->UnregisterMemory(lkey).code(), StatusCode::kNotFound);
}

TEST_P(TransferConformanceTest, NotifyArrivesAfterEveryEarlierWriteLanded) {
  constexpr int kRounds = 40;
  constexpr std::size_t kSlot = 256 << 10;
  RegionKey rkey, lkey;
  TestBuffer remote = pair_->TargetBuffer(kRounds * kSlot, Access::kRemoteReadWrite, &rkey);
  TestBuffer local = pair_->LocalBuffer(kRounds * kSlot, &lkey);
  std::memset(remote.data(), 0, remote.size());
  Mutex mu;
  std::vector<int> seen;
  int bad = 0;
  pair_->target->SetNotifyHandler([&](const NotifyMessage& m) {
    int round = 0;
    std::memcpy(&round, m.data.data(), sizeof(round));
    const bool landed = remote.Holds(round * kSlot, kSlot, round + 100, 0);
    MutexLock lock(mu);
    seen.push_back(round);
    bad += landed ? 0 : 1;
    EXPECT_EQ(m.sender, pair_->initiator->endpoint());
  });
  std::vector<std::shared_ptr<TransferBatch>> batches;
  for (int round = 0; round < kRounds; ++round) {
    char* src = local.data() + round * kSlot;
    for (std::size_t i = 0; i < kSlot; ++i) {
      src[i] = PatternByte(round + 100, i);
    }
    std::vector<TransferRequest> ops;
    for (std::size_t off = 0; off < kSlot; off += kSlot / 4) {
      ops.push_back(Op(OpKind::kWrite, src + off, rkey, round * kSlot + off, kSlot / 4));
    }
    auto b = pair_->initiator->Submit(ops);
    ASSERT_TRUE(b.ok());
    batches.push_back(*b);
    ASSERT_TRUE(pair_->initiator->Notify(pair_->segment, std::as_bytes(std::span(&round, 1))).ok());
  }
  for (auto& b : batches) {
    ASSERT_TRUE(b->Wait(30s).ok());
  }
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline) {
    MutexLock lock(mu);
    if (seen.size() == kRounds) {
      break;
    }
  }
  MutexLock lock(mu);
  ASSERT_EQ(seen.size(), static_cast<std::size_t>(kRounds));
  EXPECT_EQ(bad, 0) << "a notify overtook the write before it";
  for (int i = 0; i < kRounds; ++i) {
    EXPECT_EQ(seen[i], i) << "notifies arrive in call order";
  }
}

TEST_P(TransferConformanceTest, CallbackRunsExactlyOnceOffTheSubmittingThread) {
  RegionKey rkey, lkey;
  TestBuffer remote = pair_->TargetBuffer(1 << 20, Access::kRemoteReadWrite, &rkey);
  TestBuffer local = pair_->LocalBuffer(1 << 20, &lkey);
  std::atomic<int> calls{0};
  std::atomic<bool> inline_call{false};
  const auto submitter = std::this_thread::get_id();
  for (int i = 0; i < 50; ++i) {
    auto b = pair_->initiator->Submit(
        std::vector<TransferRequest>{Op(OpKind::kWrite, local.data(), rkey, 0, 1 + i * 1000)},
        [&](const Status& s) {
          EXPECT_TRUE(s.ok()) << s.ToString();
          inline_call = inline_call || std::this_thread::get_id() == submitter;
          calls.fetch_add(1);
        });
    ASSERT_TRUE(b.ok());
    ASSERT_TRUE((*b)->Wait(10s).ok());
  }
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (calls.load() < 50 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(calls.load(), 50);
  EXPECT_FALSE(inline_call.load());
}

INSTANTIATE_TEST_SUITE_P(AllTransports, TransferConformanceTest,
                         ::testing::Values(Mode::kTcp, Mode::kShmMapped, Mode::kShmVm),
                         [](const auto& info) { return ModeName(info.param); });

}  // namespace
}  // namespace sluice::testing
