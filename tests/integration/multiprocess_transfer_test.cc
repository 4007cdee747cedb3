// Two real processes on loopback: round trips over every transport (ucx
// over UCX's tcp and its shared memory), and a peer killed or stopped
// mid-batch.
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "gtest/gtest.h"

#include "child_process.h"
#include "device/backends.h"
#include "device/testing/sim_memory.h"
#include "transfer/testing/engine_pair.h"

namespace sluice::testing {
namespace {

using namespace std::chrono_literals;

// A transfer_peer child process: "READY <endpoint> <key>"; with a host id
// (SLUICE_HOST_ID) when `host_id` is not empty.
class PeerProcess : public ChildProcess {
 public:
  PeerProcess(const std::string& mode, std::size_t size, const std::string& host_id = "")
      : ChildProcess(
            host_id.empty()
                ? std::vector<std::string>{SLUICE_TRANSFER_PEER_BIN, mode, std::to_string(size)}
                : std::vector<std::string>{"/usr/bin/env", "SLUICE_HOST_ID=" + host_id,
                                           SLUICE_TRANSFER_PEER_BIN, mode, std::to_string(size)}) {
    EXPECT_EQ(Word(0), "READY") << banner();
    endpoint_ = Word(1);
    key_.value = std::stoull("0" + Word(2));
  }
  void Reap() { Kill(); }
  const std::string& endpoint() const { return endpoint_; }
  RegionKey key() const { return key_; }

 private:
  std::string endpoint_;
  RegionKey key_;
};

struct Case {
  Mode mode;
  const char* peer_memory;
};

class MultiProcessTest : public ::testing::TestWithParam<Case> {
 protected:
  // ucx cases: which of UCX's transports, for the peer (inherited) and here.
  void SetUp() override {
    const Mode m = GetParam().mode;
    if (m == Mode::kUcxTcp || m == Mode::kUcxShm) {
      ::setenv("UCX_TLS", m == Mode::kUcxTcp ? "tcp" : "sm", 1);
    }
  }
};

TEST_P(MultiProcessTest, RoundTripBetweenTwoProcesses) {
  constexpr std::size_t kSize = 64 << 20;
  PeerProcess peer(GetParam().peer_memory, kSize);
  auto e = TransferEngine::Create(ConfigFor(GetParam().mode, true));
  ASSERT_TRUE(e.ok());
  auto seg = (*e)->OpenSegment(peer.endpoint());
  ASSERT_TRUE(seg.ok()) << seg.status().ToString();
  TestBuffer local = TestBuffer::Anonymous(kSize);
  ASSERT_TRUE(
      (*e)->RegisterMemory(local.data(), kSize, MemoryKind::kHost, Access::kLocalOnly).ok());
  TransferRequest read{OpKind::kRead, local.data(),        *seg, peer.key(), 0,
                       kSize,         TransportHint::kAuto};
  ASSERT_TRUE((*e)->TransferSync({&read, 1}, 30s).ok());
  EXPECT_TRUE(local.Holds(0, kSize, 77, 0)) << "read did not return the peer's bytes";
  local.Fill(5);
  TransferRequest write = read;
  write.kind = OpKind::kWrite;
  ASSERT_TRUE((*e)->TransferSync({&write, 1}, 30s).ok());
  local.Fill(0);
  ASSERT_TRUE((*e)->TransferSync({&read, 1}, 30s).ok());
  EXPECT_TRUE(local.Holds(0, kSize, 5, 0)) << "write did not land in the peer";
}

// The peer dies: every op then fails with an endpoint-scope error, nothing
// hangs, and the local registration is free again (nothing leaked a pin).
TEST_P(MultiProcessTest, KilledPeerFailsOpsWithEndpointScope) {
  constexpr std::size_t kSize = 256 << 20;
  PeerProcess peer(GetParam().peer_memory, kSize);
  EngineConfig c = ConfigFor(GetParam().mode, true);
  c.op_timeout = 30s;  // Death, not the stall timeout, must end the batch.
  auto e = TransferEngine::Create(c);
  ASSERT_TRUE(e.ok());
  auto seg = (*e)->OpenSegment(peer.endpoint());
  ASSERT_TRUE(seg.ok()) << seg.status().ToString();
  TestBuffer local = TestBuffer::Anonymous(kSize);
  auto lkey = (*e)->RegisterMemory(local.data(), kSize, MemoryKind::kHost, Access::kLocalOnly);
  ASSERT_TRUE(lkey.ok());
  std::vector<TransferRequest> ops;
  for (std::size_t off = 0; off < kSize; off += 4 << 20) {
    ops.push_back(
        {OpKind::kWrite, local.data() + off, *seg, peer.key(), off, 4 << 20, TransportHint::kAuto});
  }
  if (GetParam().mode == Mode::kTcp || GetParam().mode == Mode::kUcxTcp) {
    // Stopped, the peer stops reading: the batch is certainly mid-flight.
    peer.Signal(SIGSTOP);
    auto batch = (*e)->Submit(ops);
    ASSERT_TRUE(batch.ok());
    std::this_thread::sleep_for(200ms);
    EXPECT_FALSE((*batch)->done());
    peer.Signal(SIGKILL);
    peer.Reap();
    const auto start = std::chrono::steady_clock::now();
    Status s = (*batch)->Wait(10s);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
    EXPECT_EQ(s.scope(), FailureScope::kEndpoint);
  } else {
    peer.Signal(SIGKILL);
    peer.Reap();
  }
  // Whatever the transport, the engine learns of the death promptly and
  // fails new work up front with the same scope.
  Status up_front;
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (std::chrono::steady_clock::now() < deadline) {
    auto b = (*e)->Submit(ops);
    if (!b.ok()) {
      up_front = b.status();
      break;
    }
    Status s = (*b)->Wait(10s);
    if (!s.ok()) {
      EXPECT_EQ(s.scope(), FailureScope::kEndpoint) << s.ToString();
    }
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(up_front.code(), StatusCode::kUnavailable) << up_front.ToString();
  EXPECT_EQ(up_front.scope(), FailureScope::kEndpoint);
  EXPECT_TRUE((*e)->UnregisterMemory(*lkey).ok()) << "a failed op leaked its pin";
}

// ucx over UCX's tcp to a peer that stops (SIGSTOP: its engine's
// connections stay open, so no link goes down): the ops in flight fail at
// their deadline (op_timeout) with endpoint scope, none hangs, and no pin
// leaks.
TEST(MultiProcessUcxTest, OpsToAStalledPeerFailAtTheirDeadline) {
  ::setenv("UCX_TLS", "tcp", 1);
  constexpr std::size_t kSize = 64 << 20;
  PeerProcess peer("ucx", kSize);
  EngineConfig c = ConfigFor(Mode::kUcxTcp, true);
  c.op_timeout = 1s;
  auto e = TransferEngine::Create(c);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  auto seg = (*e)->OpenSegment(peer.endpoint());
  ASSERT_TRUE(seg.ok()) << seg.status().ToString();
  TestBuffer local = TestBuffer::Anonymous(kSize);
  auto lkey = (*e)->RegisterMemory(local.data(), kSize, MemoryKind::kHost, Access::kLocalOnly);
  ASSERT_TRUE(lkey.ok());
  TransferRequest write{OpKind::kWrite, local.data(),        *seg, peer.key(), 0,
                        kSize,          TransportHint::kAuto};
  ASSERT_TRUE((*e)->TransferSync({&write, 1}, 30s).ok()) << "the path works before the stall";
  peer.Signal(SIGSTOP);
  const auto start = std::chrono::steady_clock::now();
  auto batch = (*e)->Submit({&write, 1});
  ASSERT_TRUE(batch.ok());
  Status s = (*batch)->Wait(20s);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_EQ(s.scope(), FailureScope::kEndpoint);
  EXPECT_NE(s.message().find("took longer than 1000 ms"), std::string_view::npos) << s.ToString();
  EXPECT_GE(took, 1s);
  EXPECT_LT(took, 10s);
  EXPECT_TRUE((*e)->UnregisterMemory(*lkey).ok()) << "a failed op leaked its pin";
  peer.Signal(SIGKILL);
  peer.Reap();
}

// Lines of this process's memory map that map sim device memory (each sim
// allocation, made here or opened from a peer, is mapped twice).
int SimDeviceMappings() {
  std::ifstream maps("/proc/self/maps");
  int n = 0;
  for (std::string line; std::getline(maps, line);) {
    n += line.find("sluice-sim-device") != std::string::npos ? 1 : 0;
  }
  return n;
}

// Device memory between two processes (sim backend): the peer exports its
// device allocation, this process opens it and moves host and device memory
// to and from it with the backend's copies (devipc), none over tcp; the
// peer killed, new work fails up front with endpoint scope.
TEST(MultiProcessDeviceTest, DeviceMemoryMovesBetweenTwoProcessesThroughIpc) {
  constexpr std::size_t kSize = 32 << 20;
  auto peer = std::make_unique<PeerProcess>("device", kSize);
  EngineConfig c = ConfigFor(Mode::kTcp, true);
  c.device = "sim";
  auto e = TransferEngine::Create(c);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  auto seg = (*e)->OpenSegment(peer->endpoint());
  ASSERT_TRUE(seg.ok()) << seg.status().ToString();
  TestBuffer host = TestBuffer::Anonymous(kSize);
  ASSERT_TRUE((*e)->RegisterMemory(host.data(), kSize, MemoryKind::kHost, Access::kLocalOnly).ok());
  auto backend = device::ProcessBackend("sim");
  ASSERT_TRUE(backend.ok());
  auto dev = (*backend)->Allocate(0, kSize);
  ASSERT_TRUE(dev.ok());
  auto dkey = (*e)->RegisterMemory(*dev, kSize, MemoryKind::kDevice, Access::kLocalOnly);
  ASSERT_TRUE(dkey.ok()) << dkey.status().ToString();
  const int own_mappings = SimDeviceMappings();

  TransferRequest read{OpKind::kRead, host.data(), *seg, peer->key(), 0, kSize};
  ASSERT_TRUE((*e)->TransferSync({&read, 1}, 30s).ok());
  EXPECT_TRUE(host.Holds(0, kSize, 77, 0)) << "read did not return the peer's device bytes";
  EXPECT_GT(SimDeviceMappings(), own_mappings) << "the peer's allocation is not open here";
  // Device here -> device there, then read back into host memory.
  host.Fill(5);
  auto stream = (*backend)->CreateStream(0);
  auto event = (*backend)->CreateEvent();
  ASSERT_TRUE(stream.ok() && event.ok());
  ASSERT_TRUE((*backend)->CopyAsync(*dev, host.data(), kSize, *stream).ok());
  ASSERT_TRUE((*backend)->Record(*event, *stream).ok());
  ASSERT_TRUE((*backend)->Wait(*event, 10s).ok());
  TransferRequest write{OpKind::kWrite, *dev, *seg, peer->key(), 0, kSize};
  ASSERT_TRUE((*e)->TransferSync({&write, 1}, 30s).ok());
  host.Fill(0);
  ASSERT_TRUE((*e)->TransferSync({&read, 1}, 30s).ok());
  EXPECT_TRUE(host.Holds(0, kSize, 5, 0)) << "the device write did not land in the peer";
  for (const TransportStats& s : (*e)->TransportCounters()) {
    if (s.name == "tcp") {
      EXPECT_EQ(s.bytes_read + s.bytes_written, 0u) << "device bytes went over tcp";
    }
  }

  peer->Signal(SIGKILL);
  peer->Reap();
  Status up_front;
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (up_front.ok() && std::chrono::steady_clock::now() < deadline) {
    auto b = (*e)->Submit({&write, 1});
    if (!b.ok()) {
      up_front = b.status();
    } else {
      (void)(*b)->Wait(10s);
      std::this_thread::sleep_for(10ms);
    }
  }
  EXPECT_EQ(up_front.code(), StatusCode::kUnavailable) << up_front.ToString();
  EXPECT_EQ(up_front.scope(), FailureScope::kEndpoint);
  EXPECT_TRUE((*e)->UnregisterMemory(*dkey).ok()) << "an op leaked its pin";
  // The dead peer's allocation is closed here once its link went down.
  const auto closed_by = std::chrono::steady_clock::now() + 5s;
  while (SimDeviceMappings() != own_mappings && std::chrono::steady_clock::now() < closed_by) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(SimDeviceMappings(), own_mappings) << "the dead peer's allocation is still open";
  ASSERT_TRUE((*backend)->DestroyEvent(*event).ok());
  ASSERT_TRUE((*backend)->DestroyStream(*stream).ok());
  EXPECT_TRUE((*backend)->Free(*dev).ok());
}

// Device memory at both ends, between two processes, staged over tcp (this
// engine keeps device memory off IPC, as hosts where IPC is not allowed
// do); then the peer is killed while a long batch of device reads runs:
// the batch fails with endpoint scope and no pin on the device region
// leaks.
TEST(MultiProcessDeviceTest, DeviceMemoryIsStagedOverTcpAndAKilledPeerReleasesPins) {
  constexpr std::size_t kSize = 32 << 20;
  auto peer = std::make_unique<PeerProcess>("device", kSize);
  EngineConfig c = ConfigFor(Mode::kTcp, true);
  c.device = "sim";
  c.device_ipc = false;
  auto e = TransferEngine::Create(c);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  auto seg = (*e)->OpenSegment(peer->endpoint());
  ASSERT_TRUE(seg.ok()) << seg.status().ToString();
  TestBuffer host = TestBuffer::Anonymous(kSize);
  testing::SimMemory mem;
  char* dev = mem.Allocate(0, kSize);
  auto dkey = (*e)->RegisterMemory(dev, kSize, MemoryKind::kDevice, Access::kLocalOnly);
  ASSERT_TRUE(dkey.ok()) << dkey.status().ToString();

  // The peer's device bytes into device memory here, both ends staging.
  TransferRequest read{OpKind::kRead, dev, *seg, peer->key(), 0, kSize};
  ASSERT_TRUE((*e)->TransferSync({&read, 1}, 30s).ok());
  mem.Copy(host.data(), dev, kSize);
  EXPECT_TRUE(host.Holds(0, kSize, 77, 0)) << "read did not return the peer's device bytes";
  host.Fill(9);
  mem.Copy(dev, host.data(), kSize);
  TransferRequest write{OpKind::kWrite, dev, *seg, peer->key(), 0, kSize};
  ASSERT_TRUE((*e)->TransferSync({&write, 1}, 30s).ok());
  host.Fill(0);
  mem.Copy(dev, host.data(), kSize);
  ASSERT_TRUE((*e)->TransferSync({&read, 1}, 30s).ok());
  mem.Copy(host.data(), dev, kSize);
  EXPECT_TRUE(host.Holds(0, kSize, 9, 0)) << "the staged write did not land in the peer";
  for (const TransportStats& s : (*e)->TransportCounters()) {
    if (s.name == "devipc") {
      EXPECT_EQ(s.bytes_read + s.bytes_written, 0u) << "device_ipc = false still used devipc";
    }
    if (s.name == "tcp") {
      EXPECT_GE(s.bytes_read + s.bytes_written, 3 * kSize);
    }
  }

  // A long batch (16 x 32 MiB), and the peer killed while it runs.
  std::vector<TransferRequest> many(16, read);
  auto batch = (*e)->Submit(many);
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  std::this_thread::sleep_for(20ms);
  peer->Signal(SIGKILL);
  peer->Reap();
  Status failed = (*batch)->Wait(30s);
  EXPECT_EQ(failed.code(), StatusCode::kUnavailable) << failed.ToString();
  EXPECT_EQ(failed.scope(), FailureScope::kEndpoint);
  EXPECT_TRUE((*e)->UnregisterMemory(*dkey).ok()) << "an op leaked its pin";
}

// Bytes `e` moved over transport `name` so far.
std::uint64_t TransportBytes(const TransferEngine& e, const std::string& name) {
  for (const TransportStats& t : e.TransportCounters()) {
    if (t.name == name) {
      return t.bytes_read + t.bytes_written;
    }
  }
  return 0;
}

// Same-host detection keys on the host id too: a peer on this kernel that
// names another host (SLUICE_HOST_ID, as a container or a test host in a
// network namespace would) is reached over tcp, one that names none over
// shm; a malformed id is refused by name.
TEST(MultiProcessHostIdTest, APeerNamingAnotherHostIsReachedOverTcp) {
  constexpr std::size_t kSize = 4 << 20;
  TestBuffer local = TestBuffer::Anonymous(kSize);
  EngineConfig both;
  both.transports = {"tcp", "shm"};
  auto engine = TransferEngine::Create(both);
  ASSERT_TRUE(engine.ok());
  TransferEngine& en = **engine;
  ASSERT_TRUE(en.RegisterMemory(local.data(), kSize, MemoryKind::kHost, Access::kLocalOnly).ok());
  for (const char* host : {"host-b", ""}) {
    PeerProcess peer("shared", kSize, host);
    auto seg = en.OpenSegment(peer.endpoint());
    ASSERT_TRUE(seg.ok()) << seg.status().ToString();
    const std::uint64_t tcp = TransportBytes(en, "tcp"), shm = TransportBytes(en, "shm");
    TransferRequest read{OpKind::kRead, local.data(),        *seg, peer.key(), 0,
                         kSize,         TransportHint::kAuto};
    ASSERT_TRUE(en.TransferSync({&read, 1}, 30s).ok());
    EXPECT_TRUE(local.Holds(0, kSize, 77, 0));
    const bool other_host = *host != '\0';
    EXPECT_EQ(TransportBytes(en, "tcp") - tcp, other_host ? kSize : 0)
        << "host id '" << host << "'";
    EXPECT_EQ(TransportBytes(en, "shm") - shm, other_host ? 0 : kSize)
        << "host id '" << host << "'";
  }
  const std::string err = ::testing::TempDir() + "/sluice-host-id-" + std::to_string(::getpid());
  {
    ChildProcess bad({"/usr/bin/env", "SLUICE_HOST_ID=no spaces", SLUICE_TRANSFER_PEER_BIN, "plain",
                      std::to_string(kSize)},
                     20000, err);
    EXPECT_NE(bad.Word(0), "READY");
  }
  std::stringstream said;
  said << std::ifstream(err).rdbuf();
  EXPECT_NE(said.str().find("SLUICE_HOST_ID 'no spaces' must be"), std::string::npos) << said.str();
  std::remove(err.c_str());
}

INSTANTIATE_TEST_SUITE_P(Transports, MultiProcessTest,
                         ::testing::Values(Case{Mode::kTcp, "plain"},
                                           Case{Mode::kShmMapped, "shared"},
                                           Case{Mode::kShmVm, "plain"}, Case{Mode::kUcxTcp, "ucx"},
                                           Case{Mode::kUcxShm, "ucx"}),
                         [](const auto& info) { return ModeName(info.param.mode); });

}  // namespace
}  // namespace sluice::testing
