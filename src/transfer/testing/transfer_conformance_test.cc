// The conformance suite every transport passes, for each memory kind it
// carries at each end: host memory over tcp, shm and ucx, and (on the sim device
// backend) host and device memory to and from device memory over devipc and
// tcp staging, and device memory to and from host memory. A new transport
// adds its cases to INSTANTIATE_TEST_SUITE_P (ucx: over UCX's tcp and its
// shared memory).
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

// A transport mode and the memory kind at each end.
struct Case {
  Mode mode;
  bool local_device = false;
  bool remote_device = false;
};

std::string CaseName(const Case& c) {
  if (!c.local_device && !c.remote_device) {
    return ModeName(c.mode);
  }
  return ModeName(c.mode) + (c.local_device ? "_device" : "_host") + "_to" +
         (c.remote_device ? "_device" : "_host");
}

void PrintTo(const Case& c, std::ostream* os) {
  *os << CaseName(c);
}

class TransferConformanceTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    pair_ = EnginePair::Make(GetParam().mode);
    ASSERT_NE(pair_, nullptr);
  }

  void TearDown() override {
    if (pair_ != nullptr) {
      CheckTransports();
    }
  }
  // Every byte the initiator moved went over the mode's transport.
  void CheckTransports() {
    const std::string want = ModeTransport(GetParam().mode);
    for (const TransportStats& t : pair_->initiator->TransportCounters()) {
      if (t.name != want) {
        EXPECT_EQ(t.bytes_read + t.bytes_written, 0u) << t.name << " moved bytes, not " << want;
      }
    }
  }

  TestBuffer Remote(std::size_t size, Access access, RegionKey* key) {
    return pair_->TargetBuffer(size, access, key, GetParam().remote_device);
  }
  TestBuffer Local(std::size_t size, RegionKey* key) {
    return pair_->LocalBuffer(size, key, GetParam().local_device);
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
  constexpr std::size_t kMax = kLargestSweepBytes;  // 256 MiB (64 under ASan, 32 under TSan)
  RegionKey rkey, lkey;
  TestBuffer remote = Remote(kMax, Access::kRemoteReadWrite, &rkey);
  TestBuffer local = Local(kMax, &lkey);
  for (std::size_t len : {std::size_t{1}, std::size_t{7}, std::size_t{4096},
                          (std::size_t{1} << 20) + 3, (std::size_t{16} << 20) + 1, kMax}) {
    SCOPED_TRACE("length " + std::to_string(len));
    const std::uint64_t seed = len;
    local.FillRange(0, len, seed, 0);
    ASSERT_TRUE(Run({Op(OpKind::kWrite, local.data(), rkey, 0, len)}).ok());
    ASSERT_TRUE(remote.Holds(0, len, seed, 0));
    local.Zero();
    Status s = Run({Op(OpKind::kRead, local.data(), rkey, 0, len)});
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_TRUE(local.Holds(0, len, seed, 0));
  }
}

TEST_P(TransferConformanceTest, UnalignedOffsetsOnBothSides) {
  RegionKey rkey, lkey;
  TestBuffer remote = Remote(8 << 20, Access::kRemoteReadWrite, &rkey);
  TestBuffer local = Local(8 << 20, &lkey);
  local.Fill(3);
  remote.Zero();
  const std::size_t len = (3 << 20) + 17;
  ASSERT_TRUE(Run({Op(OpKind::kWrite, local.data() + 3, rkey, 5, len)}).ok());
  EXPECT_EQ(remote.ByteAt(4), 0) << "byte before the op was touched";
  EXPECT_TRUE(remote.Holds(5, len, 3, 3));
  EXPECT_EQ(remote.ByteAt(5 + len), 0) << "byte after the op was touched";
  local.Zero();
  ASSERT_TRUE(Run({Op(OpKind::kRead, local.data() + 11, rkey, 5, len)}).ok());
  EXPECT_TRUE(local.Holds(11, len, 3, 3));
}

TEST_P(TransferConformanceTest, MixedReadsAndWritesInOneBatch) {
  RegionKey rkey, lkey;
  TestBuffer remote = Remote(4 << 20, Access::kRemoteReadWrite, &rkey);
  TestBuffer local = Local(4 << 20, &lkey);
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

// Threads submit batches at once over disjoint slices: each writes its
// slice with a pattern of its own (thread and round), overwrites the local
// copy, reads the slice back and must find its own pattern, byte for byte,
// so an op that lands in another thread's slice or batch fails it.
TEST_P(TransferConformanceTest, ConcurrentBatchesFromSeveralThreads) {
  constexpr int kThreads = 4;
  constexpr std::size_t kPerThread = 4 << 20;
  RegionKey rkey, lkey;
  TestBuffer remote = Remote(kThreads * kPerThread, Access::kRemoteReadWrite, &rkey);
  TestBuffer local = Local(kThreads * kPerThread, &lkey);
  std::atomic<int> failures{0}, wrong_bytes{0}, rounds{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      char* mine = local.data() + t * kPerThread;
      const std::uint64_t base = t * kPerThread;
      for (int round = 0; round < 15; ++round) {
        const std::uint64_t seed = 100 + t * 1000 + round;
        std::vector<std::uint64_t> lens;
        std::uint64_t total = 0;
        for (int k = 0; k < 8; ++k) {
          lens.push_back(1 + rng() % (kPerThread / 16));
          total += lens.back();
        }
        auto batch = [&](OpKind kind) {
          std::vector<TransferRequest> ops;
          std::uint64_t off = 0;
          for (std::uint64_t len : lens) {
            ops.push_back(Op(kind, mine + off, rkey, base + off, len));
            off += len;
          }
          auto b = pair_->initiator->Submit(ops);
          return b.ok() && (*b)->Wait(30s).ok();
        };
        local.FillRange(base, total, seed, 0);
        if (!batch(OpKind::kWrite)) {
          failures.fetch_add(1);
          continue;
        }
        local.FillRange(base, total, seed + 500, 0);  // Not what was written.
        if (!batch(OpKind::kRead)) {
          failures.fetch_add(1);
          continue;
        }
        if (!local.Holds(base, total, seed, 0)) {
          wrong_bytes.fetch_add(1);
        }
        rounds.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) {
    th.join();
  }
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(wrong_bytes.load(), 0) << "rounds that read back another pattern";
  EXPECT_EQ(rounds.load(), kThreads * 15);
}

TEST_P(TransferConformanceTest, OutOfBoundsOpIsRejectedAndMemoryUntouched) {
  RegionKey rkey, lkey;
  TestBuffer remote = Remote(1 << 20, Access::kRemoteReadWrite, &rkey);
  TestBuffer local = Local(2 << 20, &lkey);
  remote.Zero();
  local.Fill(9);
  Status s = Run({Op(OpKind::kWrite, local.data(), rkey, (1 << 20) - 10, 20)});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_EQ(s.scope(), FailureScope::kRequest);
  EXPECT_EQ(remote.ByteAt((1 << 20) - 1), 0);
  s = Run({Op(OpKind::kRead, local.data(), rkey, 0, (1 << 20) + 1)});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  // The engine keeps working after rejections.
  EXPECT_TRUE(Run({Op(OpKind::kWrite, local.data(), rkey, 0, 1 << 20)}).ok());
}

TEST_P(TransferConformanceTest, UnknownKeyIsRejected) {
  RegionKey rkey, lkey;
  TestBuffer remote = Remote(1 << 16, Access::kRemoteReadWrite, &rkey);
  TestBuffer local = Local(1 << 16, &lkey);
  Status s = Run({Op(OpKind::kWrite, local.data(), RegionKey{rkey.value ^ 0x5a5a}, 0, 64)});
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
}

TEST_P(TransferConformanceTest, AccessBitsAreEnforced) {
  RegionKey ro, wo, lkey;
  TestBuffer read_only = Remote(1 << 16, Access::kRemoteRead, &ro);
  TestBuffer write_only = Remote(1 << 16, Access::kRemoteWrite, &wo);
  TestBuffer local = Local(1 << 16, &lkey);
  EXPECT_EQ(Run({Op(OpKind::kWrite, local.data(), ro, 0, 64)}).code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(Run({Op(OpKind::kRead, local.data(), wo, 0, 64)}).code(),
            StatusCode::kPermissionDenied);
  EXPECT_TRUE(Run({Op(OpKind::kRead, local.data(), ro, 0, 64)}).ok());
  EXPECT_TRUE(Run({Op(OpKind::kWrite, local.data(), wo, 0, 64)}).ok());
}

// Unregistering memory that an op still uses is refused until the batch
// ends. Whether the batch is still in flight at the call is a race (128 MiB
// is ~20-60 ms here); a batch that finished first must be done and its
// unregister must succeed, and the next attempt tries again with fresh
// memory. Five early finishes in a row fail the test: the refusal is
// always exercised, never skipped.
TEST_P(TransferConformanceTest, UnregisterWhileInFlightFailsThenSucceeds) {
  constexpr std::size_t kLen = std::size_t{128} << 20;
  constexpr int kAttempts = 5;
  RegionKey rkey;
  TestBuffer remote = Remote(kLen, Access::kRemoteReadWrite, &rkey);
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    RegionKey lkey;
    TestBuffer local = Local(kLen, &lkey);
    std::vector<TransferRequest> ops;
    for (std::size_t off = 0; off < kLen; off += 4 << 20) {
      ops.push_back(Op(OpKind::kWrite, local.data() + off, rkey, off, 4 << 20));
    }
    auto batch = pair_->initiator->Submit(ops);
    ASSERT_TRUE(batch.ok());
    Status early = pair_->initiator->UnregisterMemory(lkey);
    if (early.ok()) {
      ASSERT_TRUE((*batch)->done()) << "unregistered memory that an op still used";
      continue;  // finished before the call: try again
    }
    EXPECT_EQ(early.code(), StatusCode::kFailedPrecondition) << early.ToString();
    ASSERT_TRUE((*batch)->Wait(60s).ok());
    EXPECT_TRUE(pair_->initiator->UnregisterMemory(lkey).ok());
    EXPECT_EQ(pair_->initiator->UnregisterMemory(lkey).code(), StatusCode::kNotFound);
    return;
  }
  FAIL() << "every one of " << kAttempts << " batches finished before the unregister call";
}

TEST_P(TransferConformanceTest, NotifyArrivesAfterEveryEarlierWriteLanded) {
  constexpr int kRounds = 40;
  constexpr std::size_t kSlot = 256 << 10;
  RegionKey rkey, lkey;
  TestBuffer remote = Remote(kRounds * kSlot, Access::kRemoteReadWrite, &rkey);
  TestBuffer local = Local(kRounds * kSlot, &lkey);
  remote.Zero();
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
    local.FillRange(round * kSlot, kSlot, round + 100, 0);
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
  TestBuffer remote = Remote(1 << 20, Access::kRemoteReadWrite, &rkey);
  TestBuffer local = Local(1 << 20, &lkey);
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
  // No callback can run once the engines are gone (their threads joined):
  // a second call of any would be counted by now.
  CheckTransports();
  pair_.reset();
  EXPECT_EQ(calls.load(), 50);
  EXPECT_FALSE(inline_call.load());
}

INSTANTIATE_TEST_SUITE_P(HostMemory, TransferConformanceTest,
                         ::testing::Values(Case{Mode::kTcp}, Case{Mode::kShmMapped},
                                           Case{Mode::kShmVm}, Case{Mode::kTcpSealed},
                                           Case{Mode::kUcxTcp}, Case{Mode::kUcxShm}),
                         [](const auto& info) { return CaseName(info.param); });

// Device memory at one end or both (sim backend): devipc between same-host
// device memory and device or shared host memory, and tcp staging.
INSTANTIATE_TEST_SUITE_P(
    DeviceMemory, TransferConformanceTest,
    ::testing::Values(Case{Mode::kDevipc, false, true}, Case{Mode::kDevipc, true, true},
                      Case{Mode::kDevipc, true, false}, Case{Mode::kTcpStaged, false, true},
                      Case{Mode::kTcpStaged, true, true}, Case{Mode::kTcpStaged, true, false},
                      Case{Mode::kTcpStagedSealed, true, true}),
    [](const auto& info) { return CaseName(info.param); });

}  // namespace
}  // namespace sluice::testing
