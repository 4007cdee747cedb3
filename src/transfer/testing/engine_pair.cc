#include "transfer/testing/engine_pair.h"

#include <sys/mman.h>

#include <chrono>
#include <thread>

#include "gtest/gtest.h"

namespace sluice::testing {

std::string ModeName(Mode m) {
  switch (m) {
    case Mode::kTcp:
      return "tcp";
    case Mode::kShmMapped:
      return "shm_mapped";
    case Mode::kShmVm:
      return "shm_vm";
  }
  return "unknown";
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

TestBuffer::TestBuffer(TestBuffer&& o) noexcept {
  *this = std::move(o);
}

TestBuffer& TestBuffer::operator=(TestBuffer&& o) noexcept {
  if (this != &o) {
    this->~TestBuffer();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    anonymous_ = std::exchange(o.anonymous_, false);
    shared_ = std::move(o.shared_);
  }
  return *this;
}

TestBuffer::~TestBuffer() {
  if (anonymous_ && data_ != nullptr) {
    ::munmap(data_, size_);
  }
  data_ = nullptr;
  anonymous_ = false;
}

void TestBuffer::Fill(std::uint64_t seed) {
  for (std::size_t i = 0; i < size_; ++i) {
    data_[i] = PatternByte(seed, i);
  }
}

bool TestBuffer::Holds(std::size_t off, std::size_t len, std::uint64_t seed,
                       std::size_t pattern_off) const {
  for (std::size_t i = 0; i < len; ++i) {
    if (data_[off + i] != PatternByte(seed, pattern_off + i)) {
      return false;
    }
  }
  return true;
}

EngineConfig ConfigFor(Mode mode, bool initiator) {
  EngineConfig c;
  c.listen = "127.0.0.1:0";
  c.op_timeout = std::chrono::milliseconds(10000);
  if (initiator) {
    c.transports =
        mode == Mode::kTcp ? std::vector<std::string>{"tcp"} : std::vector<std::string>{"shm"};
  }
  return c;
}

std::unique_ptr<EnginePair> EnginePair::Make(Mode mode, EngineConfig initiator_config) {
  auto p = std::make_unique<EnginePair>();
  p->mode = mode;
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

TestBuffer EnginePair::TargetBuffer(std::size_t size, Access access, RegionKey* key) {
  TestBuffer b =
      mode == Mode::kShmMapped ? TestBuffer::Shared(*target, size) : TestBuffer::Anonymous(size);
  Result<RegionKey> k = target->RegisterMemory(b.data(), size, MemoryKind::kHost, access);
  EXPECT_TRUE(k.ok()) << k.status().ToString();
  *key = k.ok() ? *k : RegionKey{};
  EXPECT_TRUE(AwaitRemoteKey(*key)) << "table push never reached the initiator";
  return b;
}

TestBuffer EnginePair::LocalBuffer(std::size_t size, RegionKey* key) {
  TestBuffer b = TestBuffer::Anonymous(size);
  Result<RegionKey> k =
      initiator->RegisterMemory(b.data(), size, MemoryKind::kHost, Access::kLocalOnly);
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
