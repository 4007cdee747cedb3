// Device memory through the engine, on the sim backend: registration checked
// against the backend, regions carrying kind and device, and devipc moving
// host and device memory to and from a same-host peer's device memory, and
// device memory to and from a same-host peer's shared host memory.
#include <chrono>
#include <cstring>
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

#include "sluice/transfer/engine.h"

#include "device/backends.h"
#include "device/testing/sim_memory.h"

namespace sluice::testing {
namespace {

using namespace std::chrono_literals;

// `device` "" gives an engine without a device backend.
EngineConfig DeviceConfig(std::string device = "sim") {
  EngineConfig c;
  c.device = std::move(device);
  // Well above any op here, even in a sanitizer build on a loaded machine:
  // no op in this suite tests the stall timeout.
  c.op_timeout = 30s;
  return c;
}

std::vector<char> Pattern(std::size_t len, int seed) {
  std::vector<char> v(len);
  for (std::size_t i = 0; i < len; ++i) {
    v[i] = static_cast<char>((i * 131 + seed * 7) % 251);
  }
  return v;
}

// `transport`'s counters in `e` (zeros when it has none).
TransportStats StatsOf(const TransferEngine& e, const std::string& transport) {
  for (const TransportStats& s : e.TransportCounters()) {
    if (s.name == transport) {
      return s;
    }
  }
  return {};
}

std::uint64_t BytesOf(const TransferEngine& e, const std::string& transport) {
  const TransportStats s = StatsOf(e, transport);
  return s.bytes_read + s.bytes_written;
}

Status RunOp(TransferEngine& e, OpKind kind, void* local, SegmentId seg, RegionKey key,
             std::uint64_t offset, std::uint64_t len, TransportHint hint = TransportHint::kAuto) {
  TransferRequest op;
  op.hint = hint;
  op.kind = kind;
  op.local = local;
  op.segment = seg;
  op.remote_key = key;
  op.remote_offset = offset;
  op.length = len;
  auto b = e.Submit({&op, 1});
  if (!b.ok()) {
    return b.status();
  }
  return (*b)->Wait(40s);
}

TEST(DeviceRegistrationTest, RegistrationIsCheckedAgainstTheBackend) {
  SimMemory mem;
  char* dev = mem.Allocate(1, 1 << 20);
  std::vector<char> host(4096);

  auto plain = TransferEngine::Create(EngineConfig{});
  ASSERT_TRUE(plain.ok());
  Result<RegionKey> none =
      (*plain)->RegisterMemory(dev, 4096, MemoryKind::kDevice, Access::kRemoteRead);
  EXPECT_EQ(none.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(none.status().message().find("EngineConfig::device"), std::string_view::npos);

  auto bad = TransferEngine::Create(DeviceConfig("tpu"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("config.device"), std::string_view::npos)
      << bad.status().ToString();

  auto e = TransferEngine::Create(DeviceConfig());
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  TransferEngine& engine = **e;
  auto expect_refused = [&](Result<RegionKey> r, std::string_view says) {
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << says;
    EXPECT_NE(r.status().message().find(says), std::string_view::npos) << r.status().ToString();
  };
  expect_refused(
      engine.RegisterMemory(host.data(), host.size(), MemoryKind::kDevice, Access::kRemoteRead),
      "not sim device memory");
  expect_refused(engine.RegisterMemory(dev, 4096, MemoryKind::kHost, Access::kRemoteRead),
                 "register it as MemoryKind::kDevice");
  expect_refused(engine.RegisterMemory(dev, 4096, MemoryKind::kDevice, Access::kRemoteRead, 0),
                 "on device 1, not device 0");
  expect_refused(
      engine.RegisterMemory(dev + 4096, 1 << 20, MemoryKind::kDevice, Access::kRemoteRead),
      "run past");
  expect_refused(
      engine.RegisterMemory(host.data(), host.size(), MemoryKind::kHost, Access::kRemoteRead, 0),
      "host memory takes no device");

  Result<RegionKey> k =
      engine.RegisterMemory(dev + 4096, 8192, MemoryKind::kDevice, Access::kRemoteReadWrite, 1);
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  auto peer = TransferEngine::Create(DeviceConfig());
  ASSERT_TRUE(peer.ok());
  Result<SegmentId> seg = (*peer)->OpenSegment(engine.endpoint());
  ASSERT_TRUE(seg.ok()) << seg.status().ToString();
  Result<std::vector<RegionInfo>> regions = (*peer)->SegmentRegions(*seg);
  ASSERT_TRUE(regions.ok());
  ASSERT_EQ(regions->size(), 1u);
  EXPECT_EQ((*regions)[0].key, *k);
  EXPECT_EQ((*regions)[0].kind, MemoryKind::kDevice);
  EXPECT_EQ((*regions)[0].device, 1);
  EXPECT_EQ((*regions)[0].length, 8192u);
  EXPECT_TRUE(engine.UnregisterMemory(*k).ok());
}

class DeviceTransferTest : public ::testing::Test {
 protected:
  static constexpr std::size_t kRegion = std::size_t{40} << 20;

  void SetUp() override {
    auto t = TransferEngine::Create(DeviceConfig());
    auto i = TransferEngine::Create(DeviceConfig());
    ASSERT_TRUE(t.ok() && i.ok());
    target_ = std::move(*t);
    initiator_ = std::move(*i);
    remote_ = mem_.Allocate(1, kRegion);
    auto k =
        target_->RegisterMemory(remote_, kRegion, MemoryKind::kDevice, Access::kRemoteReadWrite);
    ASSERT_TRUE(k.ok()) << k.status().ToString();
    key_ = *k;
    local_dev_ = mem_.Allocate(0, kRegion);
    ASSERT_TRUE(
        initiator_->RegisterMemory(local_dev_, kRegion, MemoryKind::kDevice, Access::kLocalOnly)
            .ok());
    host_.resize(kRegion);
    ASSERT_TRUE(
        initiator_
            ->RegisterMemory(host_.data(), host_.size(), MemoryKind::kHost, Access::kLocalOnly)
            .ok());
    auto seg = initiator_->OpenSegment(target_->endpoint());
    ASSERT_TRUE(seg.ok()) << seg.status().ToString();
    seg_ = *seg;
  }

  SimMemory mem_;  // Outlives the engines (declared first).
  std::unique_ptr<TransferEngine> target_, initiator_;
  char* remote_ = nullptr;
  char* local_dev_ = nullptr;
  std::vector<char> host_;
  RegionKey key_;
  SegmentId seg_;
};

TEST_F(DeviceTransferTest, HostAndDeviceMemoryMoveToAndFromAPeersDeviceMemory) {
  const std::uint64_t tcp_before = BytesOf(*initiator_, "tcp");
  int seed = 0;
  for (std::size_t len :
       {std::size_t{1}, std::size_t{4099}, (std::size_t{1} << 20) + 3, std::size_t{16} << 20}) {
    for (std::uint64_t offset : {std::uint64_t{0}, std::uint64_t{12345}}) {
      SCOPED_TRACE("len " + std::to_string(len) + " offset " + std::to_string(offset));
      // Host here -> device there, read back into host memory.
      const std::vector<char> a = Pattern(len, ++seed);
      std::memcpy(host_.data(), a.data(), len);
      ASSERT_TRUE(RunOp(*initiator_, OpKind::kWrite, host_.data(), seg_, key_, offset, len).ok());
      std::memset(host_.data(), 0, len);
      ASSERT_TRUE(RunOp(*initiator_, OpKind::kRead, host_.data(), seg_, key_, offset, len).ok());
      ASSERT_EQ(std::memcmp(host_.data(), a.data(), len), 0);
      // What landed is in the target's device memory.
      std::vector<char> there(len);
      mem_.Copy(there.data(), remote_ + offset, len);
      ASSERT_EQ(there, a);

      // Device here -> device there, and back into device memory here.
      const std::vector<char> b = Pattern(len, ++seed);
      mem_.Copy(local_dev_, b.data(), len);
      ASSERT_TRUE(RunOp(*initiator_, OpKind::kWrite, local_dev_, seg_, key_, offset, len).ok());
      ASSERT_TRUE(
          RunOp(*initiator_, OpKind::kRead, local_dev_ + len, seg_, key_, offset, len).ok());
      std::vector<char> back(len);
      mem_.Copy(back.data(), local_dev_ + len, len);
      ASSERT_EQ(back, b);
    }
  }
  EXPECT_GT(BytesOf(*initiator_, "devipc"), std::uint64_t{64} << 20);
  EXPECT_EQ(BytesOf(*initiator_, "tcp"), tcp_before) << "device bytes went over tcp";
}

TEST_F(DeviceTransferTest, RangeAndAccessAreCheckedAndABatchMixesKinds) {
  Status past = RunOp(*initiator_, OpKind::kWrite, host_.data(), seg_, key_, kRegion - 10, 11);
  EXPECT_EQ(past.code(), StatusCode::kInvalidArgument) << past.ToString();
  char* ro = mem_.Allocate(0, 4096);
  auto k = target_->RegisterMemory(ro, 4096, MemoryKind::kDevice, Access::kRemoteRead);
  ASSERT_TRUE(k.ok());
  // The initiator sees the new table once the target pushed it.
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  Status denied;
  do {
    denied = RunOp(*initiator_, OpKind::kWrite, host_.data(), seg_, *k, 0, 16);
  } while (denied.code() == StatusCode::kNotFound && std::chrono::steady_clock::now() < deadline);
  EXPECT_EQ(denied.code(), StatusCode::kPermissionDenied) << denied.ToString();

  // One batch: host and device sources, to two offsets.
  const std::vector<char> a = Pattern(3000, 1), b = Pattern(5000, 2);
  std::memcpy(host_.data(), a.data(), a.size());
  mem_.Copy(local_dev_, b.data(), b.size());
  TransferRequest ops[2];
  ops[0] = TransferRequest{OpKind::kWrite, host_.data(), seg_, key_, 0, a.size()};
  ops[1] = TransferRequest{OpKind::kWrite, local_dev_, seg_, key_, 10000, b.size()};
  auto batch = initiator_->Submit(ops);
  ASSERT_TRUE(batch.ok());
  ASSERT_TRUE((*batch)->Wait(10s).ok());
  std::vector<char> there(15000);
  mem_.Copy(there.data(), remote_, there.size());
  EXPECT_EQ(std::memcmp(there.data(), a.data(), a.size()), 0);
  EXPECT_EQ(std::memcmp(there.data() + 10000, b.data(), b.size()), 0);
}

// Device memory here and a same-host peer's shared host memory (what a
// store node's segments are): devipc copies straight between the device and
// the peer's allocation mapped here, nothing over tcp. Host memory at both
// ends stays on shm.
TEST_F(DeviceTransferTest, DeviceMemoryMovesToAndFromAPeersSharedHostMemoryOverDevipc) {
  auto shared = target_->AllocateShared(std::size_t{20} << 20);
  ASSERT_TRUE(shared.ok()) << shared.status().ToString();
  char* far = static_cast<char*>(shared->data());
  auto k =
      target_->RegisterMemory(far, shared->size(), MemoryKind::kHost, Access::kRemoteReadWrite);
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  // The initiator sees the new table once the target pushed it (until
  // then a same-host path knows nothing of the key; tcp would take it).
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  Status first;
  do {
    first = RunOp(*initiator_, OpKind::kWrite, host_.data(), seg_, *k, 0, 1,
                  TransportHint::kSameHostOnly);
  } while (first.code() == StatusCode::kNotFound && std::chrono::steady_clock::now() < deadline);
  ASSERT_TRUE(first.ok()) << first.ToString();

  const std::uint64_t tcp_before = BytesOf(*initiator_, "tcp");
  const std::uint64_t devipc_before = BytesOf(*initiator_, "devipc");
  const std::uint64_t shm_before = BytesOf(*initiator_, "shm");
  int seed = 40;
  for (std::size_t len :
       {std::size_t{1}, std::size_t{4099}, (std::size_t{1} << 20) + 3, std::size_t{9} << 20}) {
    for (std::uint64_t offset : {std::uint64_t{0}, std::uint64_t{54321}}) {
      SCOPED_TRACE("len " + std::to_string(len) + " offset " + std::to_string(offset));
      const std::vector<char> a = Pattern(len, ++seed);
      mem_.Copy(local_dev_, a.data(), len);
      ASSERT_TRUE(RunOp(*initiator_, OpKind::kWrite, local_dev_, seg_, *k, offset, len).ok());
      ASSERT_EQ(std::memcmp(far + offset, a.data(), len), 0);
      const std::vector<char> b = Pattern(len, ++seed);
      std::memcpy(far + offset, b.data(), len);
      ASSERT_TRUE(RunOp(*initiator_, OpKind::kRead, local_dev_ + len, seg_, *k, offset, len).ok());
      std::vector<char> back(len);
      mem_.Copy(back.data(), local_dev_ + len, len);
      ASSERT_EQ(back, b);
    }
  }
  EXPECT_EQ(BytesOf(*initiator_, "tcp"), tcp_before) << "device bytes went over tcp";
  EXPECT_GT(BytesOf(*initiator_, "devipc") - devipc_before, std::uint64_t{20} << 20);
  // Host memory here to the same allocation: shm's, not devipc's.
  const std::uint64_t devipc_mid = BytesOf(*initiator_, "devipc");
  ASSERT_TRUE(RunOp(*initiator_, OpKind::kWrite, host_.data(), seg_, *k, 0, 65536).ok());
  EXPECT_EQ(BytesOf(*initiator_, "devipc"), devipc_mid);
  EXPECT_EQ(BytesOf(*initiator_, "shm") - shm_before, 65536u + 0u);
  // The range is checked against the peer's region.
  Status past = RunOp(*initiator_, OpKind::kWrite, local_dev_, seg_, *k, shared->size() - 10, 11);
  EXPECT_EQ(past.code(), StatusCode::kInvalidArgument) << past.ToString();
}

// Over tcp, each side stages its own device memory through pinned slots:
// a peer without a device backend moves host memory to and from a device
// region (the target stages), and engines that keep device memory off IPC
// (device_ipc = false) move device memory to device and to host memory.
// Several slices per op, so connections overlap.
TEST_F(DeviceTransferTest, TcpCarriesDeviceMemoryThroughPinnedStagingAtEitherEnd) {
  std::vector<char> far_host(kRegion);
  auto host_key = target_->RegisterMemory(far_host.data(), far_host.size(), MemoryKind::kHost,
                                          Access::kRemoteReadWrite);
  ASSERT_TRUE(host_key.ok());

  auto plain = TransferEngine::Create(DeviceConfig(""));
  EngineConfig staged = DeviceConfig();
  staged.device_ipc = false;
  auto staging = TransferEngine::Create(staged);
  ASSERT_TRUE(plain.ok() && staging.ok());
  std::vector<char> buf(kRegion);
  ASSERT_TRUE(
      (*plain)->RegisterMemory(buf.data(), buf.size(), MemoryKind::kHost, Access::kLocalOnly).ok());
  char* dev = mem_.Allocate(0, kRegion);
  ASSERT_TRUE(
      (*staging)->RegisterMemory(dev, kRegion, MemoryKind::kDevice, Access::kLocalOnly).ok());
  auto plain_seg = (*plain)->OpenSegment(target_->endpoint());
  auto staged_seg = (*staging)->OpenSegment(target_->endpoint());
  ASSERT_TRUE(plain_seg.ok() && staged_seg.ok());

  int seed = 20;
  for (std::size_t len : {std::size_t{1}, std::size_t{4099}, (std::size_t{3} << 20) + 5}) {
    SCOPED_TRACE("len " + std::to_string(len));
    // Host (no backend here) -> the target's device memory, and back.
    const std::vector<char> a = Pattern(len, ++seed);
    std::memcpy(buf.data(), a.data(), len);
    ASSERT_TRUE(RunOp(**plain, OpKind::kWrite, buf.data(), *plain_seg, key_, 777, len).ok());
    std::vector<char> there(len);
    mem_.Copy(there.data(), remote_ + 777, len);
    ASSERT_EQ(there, a);
    std::memset(buf.data(), 0, len);
    ASSERT_TRUE(RunOp(**plain, OpKind::kRead, buf.data(), *plain_seg, key_, 777, len).ok());
    ASSERT_EQ(std::memcmp(buf.data(), a.data(), len), 0);

    // Device here -> device there, over tcp (both ends stage), and back.
    const std::vector<char> b = Pattern(len, ++seed);
    mem_.Copy(dev, b.data(), len);
    ASSERT_TRUE(RunOp(**staging, OpKind::kWrite, dev, *staged_seg, key_, 4096, len).ok());
    ASSERT_TRUE(RunOp(**staging, OpKind::kRead, dev + len, *staged_seg, key_, 4096, len).ok());
    std::vector<char> back(len);
    mem_.Copy(back.data(), dev + len, len);
    ASSERT_EQ(back, b);

    // Device here -> host memory there, and back.
    const std::vector<char> c = Pattern(len, ++seed);
    mem_.Copy(dev, c.data(), len);
    ASSERT_TRUE(RunOp(**staging, OpKind::kWrite, dev, *staged_seg, *host_key, 9, len).ok());
    ASSERT_EQ(std::memcmp(far_host.data() + 9, c.data(), len), 0);
    ASSERT_TRUE(RunOp(**staging, OpKind::kRead, dev + len, *staged_seg, *host_key, 9, len).ok());
    mem_.Copy(back.data(), dev + len, len);
    ASSERT_EQ(back, c);
  }
  // What the target served over tcp: every op above, counted once.
  const std::uint64_t sum = 1 + 4099 + (std::uint64_t{3} << 20) + 5;
  TransportStats served = StatsOf(*target_, "tcp");
  EXPECT_EQ(served.bytes_served_read, 3 * sum);
  EXPECT_EQ(served.bytes_served_written, 3 * sum);
  EXPECT_EQ(BytesOf(**staging, "devipc"), 0u) << "device_ipc = false still used devipc";
  EXPECT_GT(BytesOf(**staging, "tcp"), std::uint64_t{6} << 20);

  // An initiator slicing coarser than the target's staging slots is refused
  // by name; the target serves on.
  EngineConfig coarse = DeviceConfig("");
  coarse.slice_size = std::size_t{4} << 20;
  auto big = TransferEngine::Create(coarse);
  ASSERT_TRUE(big.ok());
  ASSERT_TRUE(
      (*big)->RegisterMemory(buf.data(), buf.size(), MemoryKind::kHost, Access::kLocalOnly).ok());
  auto big_seg = (*big)->OpenSegment(target_->endpoint());
  ASSERT_TRUE(big_seg.ok());
  Status refused = RunOp(**big, OpKind::kWrite, buf.data(), *big_seg, key_, 0, 4 << 20);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument) << refused.ToString();
  EXPECT_NE(refused.message().find("slice_size"), std::string_view::npos) << refused.ToString();
  const std::vector<char> d = Pattern(4096, 99);
  std::memcpy(buf.data(), d.data(), d.size());
  EXPECT_TRUE(RunOp(**plain, OpKind::kWrite, buf.data(), *plain_seg, key_, 0, d.size()).ok());
  served = StatsOf(*target_, "tcp");
  EXPECT_EQ(served.bytes_served_read, 3 * sum) << "a refused write counted";
  EXPECT_EQ(served.bytes_served_written, 3 * sum + d.size()) << "a refused write counted";
}

}  // namespace
}  // namespace sluice::testing
