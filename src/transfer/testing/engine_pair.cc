#include "transfer/testing/engine_pair.h"

#include <sys/mman.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

#include "device/backends.h"

namespace sluice::testing {

std::string ModeName(Mode m) {
  switch (m) {
    case Mode::kTcp:
      return "tcp";
    case Mode::kShmMapped:
      return "shm_mapped";
    case Mode::kShmVm:
      return "shm_vm";
    case Mode::kDevipc:
      return "devipc";
    case Mode::kTcpStaged:
      return "tcp_staged";
    case Mode::kTcpSealed:
      return "tcp_sealed";
    case Mode::kTcpStagedSealed:
      return "tcp_staged_sealed";
    case Mode::kUcxTcp:
      return "ucx_tcp";
    case Mode::kUcxShm:
      return "ucx_shm";
  }
  return "unknown";
}

std::string ModeTransport(Mode m) {
  if (TcpOnly(m)) {
    return "tcp";
  }
  if (m == Mode::kUcxTcp || m == Mode::kUcxShm) {
    return "ucx";
  }
  return m == Mode::kDevipc ? "devipc" : "shm";
}

TestBuffer TestBuffer::Anonymous(std::size_t size) {
  TestBuffer b;
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED) {
    ADD_FAILURE() << "mmap of " << size << " bytes failed";
    return b;
  }
  b.data_ = static_cast<char*>(p);
  b.size_ = size;
  b.anonymous_ = true;
  return b;
}

TestBuffer TestBuffer::Shared(TransferEngine& engine, std::size_t size) {
  TestBuffer b;
  Result<SharedBuffer> s = engine.AllocateShared(size);
  if (!s.ok()) {
    ADD_FAILURE() << s.status().ToString();
    return b;
  }
  b.shared_ = std::move(*s);
  b.data_ = static_cast<char*>(b.shared_.data());
  b.size_ = size;
  return b;
}

TestBuffer TestBuffer::Device(int device, std::size_t size) {
  TestBuffer b;
  Result<device::DeviceBackend*> sim = device::ProcessBackend("sim");
  if (!sim.ok()) {
    ADD_FAILURE() << sim.status().ToString();
    return b;
  }
  Result<void*> p = (*sim)->Allocate(device, size);
  if (!p.ok()) {
    ADD_FAILURE() << p.status().ToString();
    return b;
  }
  b.data_ = static_cast<char*>(*p);
  b.size_ = size;
  b.device_ = device;
  return b;
}

void TestBuffer::CopySync(void* dst, const void* src, std::size_t len) const {
  device::DeviceBackend* sim = *device::ProcessBackend("sim");
  Result<device::Stream> stream = sim->CreateStream(device_);
  Result<device::Event> event = sim->CreateEvent();
  ASSERT_TRUE(stream.ok() && event.ok());
  EXPECT_TRUE(sim->CopyAsync(dst, src, len, *stream).ok());
  EXPECT_TRUE(sim->Record(*event, *stream).ok());
  EXPECT_TRUE(sim->Wait(*event, std::chrono::seconds(30)).ok());
  EXPECT_TRUE(sim->DestroyEvent(*event).ok());
  EXPECT_TRUE(sim->DestroyStream(*stream).ok());
}

TestBuffer::TestBuffer(TestBuffer&& o) noexcept {
  *this = std::move(o);
}

TestBuffer& TestBuffer::operator=(TestBuffer&& o) noexcept {
  if (this != &o) {
    this->~TestBuffer();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    anonymous_ = std::exchange(o.anonymous_, false);
    device_ = std::exchange(o.device_, -1);
    shared_ = std::move(o.shared_);
  }
  return *this;
}

TestBuffer::~TestBuffer() {
  if (anonymous_ && data_ != nullptr) {
    ::munmap(data_, size_);
  }
  if (device_ != -1 && data_ != nullptr) {
    EXPECT_TRUE((*device::ProcessBackend("sim"))->Free(data_).ok());
  }
  data_ = nullptr;
  anonymous_ = false;
  device_ = -1;
}

void TestBuffer::Fill(std::uint64_t seed) {
  FillRange(0, size_, seed, 0);
}

void TestBuffer::FillRange(std::size_t off, std::size_t len, std::uint64_t seed,
                           std::size_t pattern_off) {
  if (!on_device()) {
    for (std::size_t i = 0; i < len; ++i) {
      data_[off + i] = PatternByte(seed, pattern_off + i);
    }
    return;
  }
  std::vector<char> host(len);
  for (std::size_t i = 0; i < len; ++i) {
    host[i] = PatternByte(seed, pattern_off + i);
  }
  CopySync(data_ + off, host.data(), len);
}

void TestBuffer::Zero() {
  if (!on_device()) {
    std::memset(data_, 0, size_);
    return;
  }
  const std::vector<char> zeros(size_, 0);
  CopySync(data_, zeros.data(), size_);
}

char TestBuffer::ByteAt(std::size_t off) const {
  if (!on_device()) {
    return data_[off];
  }
  char c = 0;
  CopySync(&c, data_ + off, 1);
  return c;
}

bool TestBuffer::Holds(std::size_t off, std::size_t len, std::uint64_t seed,
                       std::size_t pattern_off) const {
  const char* at = data_ + off;
  std::vector<char> host;
  if (on_device()) {
    host.resize(len);
    CopySync(host.data(), at, len);
    at = host.data();
  }
  for (std::size_t i = 0; i < len; ++i) {
    if (at[i] != PatternByte(seed, pattern_off + i)) {
      return false;
    }
  }
  return true;
}

EngineConfig ConfigFor(Mode mode, bool initiator) {
  EngineConfig c;
  c.listen = "127.0.0.1:0";
  c.op_timeout = std::chrono::milliseconds(10000);
  if (mode == Mode::kDevipc || mode == Mode::kTcpStaged || mode == Mode::kTcpStagedSealed) {
    c.device = "sim";
    c.device_ipc = mode == Mode::kDevipc;
  }
  if (mode == Mode::kTcpSealed || mode == Mode::kTcpStagedSealed) {
    c.secret = "engine-pair-secret-0123456789abcdef";
    c.encrypt_data = true;
  }
  const bool ucx = mode == Mode::kUcxTcp || mode == Mode::kUcxShm;
  if (initiator) {
    c.transports = {ModeTransport(mode) == "devipc" ? std::string("shm") : ModeTransport(mode)};
  } else if (ucx) {
    c.transports = {"tcp", "ucx"};
  }
  return c;
}

std::unique_ptr<EnginePair> EnginePair::Make(Mode mode, EngineConfig initiator_config) {
  auto p = std::make_unique<EnginePair>();
  p->mode = mode;
  if (mode == Mode::kUcxTcp || mode == Mode::kUcxShm) {
    // SLUICE_TEST_UCX_TLS runs the ucx cases over other UCX transports
    // (the `rdma` run: verbs where the hardware exists).
    const char* over = std::getenv("SLUICE_TEST_UCX_TLS");
    ::setenv("UCX_TLS", over != nullptr ? over : mode == Mode::kUcxTcp ? "tcp" : "sm", 1);
  }
  auto t = TransferEngine::Create(ConfigFor(mode, false));
  auto i = TransferEngine::Create(initiator_config);
  if (!t.ok() || !i.ok()) {
    ADD_FAILURE() << t.status().ToString() << " / " << i.status().ToString();
    return nullptr;
  }
  p->target = std::move(*t);
  p->initiator = std::move(*i);
  Result<SegmentId> seg = p->initiator->OpenSegment(p->target->endpoint());
  if (!seg.ok()) {
    ADD_FAILURE() << seg.status().ToString();
    return nullptr;
  }
  p->segment = *seg;
  return p;
}

TestBuffer EnginePair::TargetBuffer(std::size_t size, Access access, RegionKey* key, bool device) {
  TestBuffer b = device ? TestBuffer::Device(1, size)
                 : mode == Mode::kShmMapped || mode == Mode::kDevipc
                     ? TestBuffer::Shared(*target, size)
                     : TestBuffer::Anonymous(size);
  Result<RegionKey> k = target->RegisterMemory(
      b.data(), size, device ? MemoryKind::kDevice : MemoryKind::kHost, access);
  EXPECT_TRUE(k.ok()) << k.status().ToString();
  *key = k.ok() ? *k : RegionKey{};
  EXPECT_TRUE(AwaitRemoteKey(*key)) << "table push never reached the initiator";
  return b;
}

TestBuffer EnginePair::LocalBuffer(std::size_t size, RegionKey* key, bool device) {
  TestBuffer b = device ? TestBuffer::Device(0, size) : TestBuffer::Anonymous(size);
  Result<RegionKey> k = initiator->RegisterMemory(
      b.data(), size, device ? MemoryKind::kDevice : MemoryKind::kHost, Access::kLocalOnly);
  EXPECT_TRUE(k.ok()) << k.status().ToString();
  *key = k.ok() ? *k : RegionKey{};
  return b;
}

bool EnginePair::AwaitRemoteKey(RegionKey key) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < deadline) {
    Result<std::vector<RegionInfo>> regions = initiator->SegmentRegions(segment);
    if (regions.ok()) {
      for (const RegionInfo& r : *regions) {
        if (r.key == key) {
          return true;
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return false;
}

}  // namespace sluice::testing
