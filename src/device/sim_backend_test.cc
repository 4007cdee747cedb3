// The sim device backend behaves like a device: memory only its copies
// touch (a CPU touch faults), asynchronous in-order copies per stream,
// events, pointer attributes, and IPC handles another process opens.
#include "device/sim_backend.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

extern char** environ;

namespace sluice::device {
namespace {

using namespace std::chrono_literals;

constexpr char kChildEnv[] = "SLUICE_SIM_IPC_CHILD";

std::string Hex(const IpcHandle& h) {
  std::string out;
  char buf[3];
  for (std::byte b : h.bytes) {
    std::snprintf(buf, sizeof(buf), "%02x", static_cast<unsigned>(b));
    out += buf;
  }
  return out;
}

IpcHandle FromHex(const std::string& s) {
  IpcHandle h;
  for (std::size_t i = 0; i < h.bytes.size() && 2 * i + 1 < s.size(); ++i) {
    h.bytes[i] = static_cast<std::byte>(std::stoi(s.substr(2 * i, 2), nullptr, 16));
  }
  return h;
}

// The IPC peer: opens the handle in its own backend, checks the bytes the
// parent left (all 0x5a), writes 0xa5 over them. Runs before gtest's main
// when the test re-executes itself with kChildEnv set.
int RunIpcChild(const char* hex) {
  auto backend = MakeSimBackend();
  if (!backend.ok()) {
    return 10;
  }
  DeviceBackend& b = **backend;
  Result<void*> dev = b.OpenIpc(FromHex(hex));
  if (!dev.ok()) {
    std::fprintf(stderr, "OpenIpc: %s\n", dev.status().ToString().c_str());
    return 11;
  }
  std::vector<char> host(1 << 20);
  Result<Stream> s = b.CreateStream(0);
  Result<Event> e = b.CreateEvent();
  if (!s.ok() || !e.ok() || !b.CopyAsync(host.data(), *dev, host.size(), *s).ok() ||
      !b.Record(*e, *s).ok() || !b.Wait(*e, 5s).ok()) {
    return 12;
  }
  for (char c : host) {
    if (c != 0x5a) {
      return 13;
    }
  }
  std::memset(host.data(), 0xa5, host.size());
  if (!b.CopyAsync(*dev, host.data(), host.size(), *s).ok() || !b.Record(*e, *s).ok() ||
      !b.Wait(*e, 5s).ok() || !b.CloseIpc(*dev).ok()) {
    return 14;
  }
  return 0;
}

[[maybe_unused]] const bool kChild = [] {
  if (const char* hex = std::getenv(kChildEnv)) {
    std::_Exit(RunIpcChild(hex));
  }
  return false;
}();

class SimBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto b = MakeSimBackend(SimOptions{2, std::size_t{64} << 20});
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    backend_ = std::move(*b);
    auto s = backend_->CreateStream(0);
    auto e = backend_->CreateEvent();
    ASSERT_TRUE(s.ok() && e.ok());
    stream_ = *s;
    event_ = *e;
  }

  // Queues a copy and waits for it.
  void CopySync(void* dst, const void* src, std::size_t len) {
    ASSERT_TRUE(backend_->CopyAsync(dst, src, len, stream_).ok());
    ASSERT_TRUE(backend_->Record(event_, stream_).ok());
    ASSERT_TRUE(backend_->Wait(event_, 5s).ok());
  }

  std::unique_ptr<DeviceBackend> backend_;
  Stream stream_;
  Event event_;
};

TEST_F(SimBackendTest, CopiesMoveBytesHostToDeviceDeviceToDeviceAndBack) {
  constexpr std::size_t kLen = 3 << 20;
  Result<void*> a = backend_->Allocate(0, kLen);
  Result<void*> b = backend_->Allocate(1, kLen);
  ASSERT_TRUE(a.ok() && b.ok());
  Result<void*> pinned = backend_->AllocatePinned(kLen);
  ASSERT_TRUE(pinned.ok());
  auto* host = static_cast<unsigned char*>(*pinned);
  for (std::size_t i = 0; i < kLen; ++i) {
    host[i] = static_cast<unsigned char>(i * 7);
  }
  CopySync(*a, host, kLen);
  CopySync(*b, *a, kLen);
  std::vector<unsigned char> back(kLen);
  CopySync(back.data(), *b, kLen);
  EXPECT_EQ(std::memcmp(back.data(), host, kLen), 0);
  // An interior pointer copies a sub-range.
  std::vector<unsigned char> part(100);
  CopySync(part.data(), static_cast<char*>(*b) + 1000, part.size());
  EXPECT_EQ(std::memcmp(part.data(), host + 1000, part.size()), 0);
  EXPECT_TRUE(backend_->Free(*a).ok());
  EXPECT_TRUE(backend_->Free(*b).ok());
  EXPECT_TRUE(backend_->FreePinned(*pinned).ok());
}

TEST_F(SimBackendTest, CopiesOnAStreamCompleteInOrderAndAsynchronously) {
  constexpr std::size_t kLen = 8 << 20;
  Result<void*> dev = backend_->Allocate(0, kLen);
  ASSERT_TRUE(dev.ok());
  std::vector<char> first(kLen, 1);
  std::vector<char> second(kLen, 2);
  std::vector<char> out(kLen, 0);
  // Three copies queued back to back: the read sees the second write.
  ASSERT_TRUE(backend_->CopyAsync(*dev, first.data(), kLen, stream_).ok());
  ASSERT_TRUE(backend_->CopyAsync(*dev, second.data(), kLen, stream_).ok());
  ASSERT_TRUE(backend_->CopyAsync(out.data(), *dev, kLen, stream_).ok());
  ASSERT_TRUE(backend_->Record(event_, stream_).ok());
  ASSERT_TRUE(backend_->Wait(event_, 5s).ok());
  EXPECT_EQ(out, second);
  Result<bool> done = backend_->Query(event_);
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(*done);
  EXPECT_TRUE(backend_->Free(*dev).ok());
}

TEST_F(SimBackendTest, AttributesSayWhatAPointerIs) {
  Result<void*> dev = backend_->Allocate(1, 10000);
  ASSERT_TRUE(dev.ok());
  Result<PointerInfo> in = backend_->Attributes(static_cast<char*>(*dev) + 123);
  ASSERT_TRUE(in.ok());
  EXPECT_EQ(in->kind, MemoryKind::kDevice);
  EXPECT_EQ(in->device, 1);
  EXPECT_EQ(in->base, *dev);
  EXPECT_EQ(in->length, 10000u);
  int on_stack = 0;
  Result<PointerInfo> host = backend_->Attributes(&on_stack);
  ASSERT_TRUE(host.ok());
  EXPECT_EQ(host->kind, MemoryKind::kHost);
  EXPECT_EQ(host->device, -1);
  EXPECT_TRUE(backend_->Free(*dev).ok());
}

TEST_F(SimBackendTest, BadArgumentsAreRefusedNamingWhatIsWrong) {
  EXPECT_EQ(backend_->Allocate(2, 4096).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->Allocate(0, 0).status().code(), StatusCode::kInvalidArgument);
  Result<void*> big = backend_->Allocate(0, std::size_t{65} << 20);
  EXPECT_EQ(big.status().code(), StatusCode::kResourceExhausted) << big.status().ToString();
  Result<void*> dev = backend_->Allocate(0, 4096);
  ASSERT_TRUE(dev.ok());
  char host[8192];
  Status past = backend_->CopyAsync(host, *dev, sizeof(host), stream_);
  EXPECT_EQ(past.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(past.message().find("runs past"), std::string_view::npos) << past.ToString();
  EXPECT_EQ(backend_->CopyAsync(host, *dev, 16, Stream{999}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->Free(static_cast<char*>(*dev) + 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->FreePinned(host).code(), StatusCode::kInvalidArgument);
  IpcHandle junk;
  EXPECT_EQ(backend_->OpenIpc(junk).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(backend_->Free(*dev).ok());
  EXPECT_EQ(backend_->Free(*dev).code(), StatusCode::kInvalidArgument) << "freed twice";
  EXPECT_EQ(MakeSimBackend(SimOptions{0}).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(SimBackendTest, FreedMemoryGoesBackToTheDevicesCapacity) {
  for (int i = 0; i < 4; ++i) {
    Result<void*> dev = backend_->Allocate(0, std::size_t{40} << 20);
    ASSERT_TRUE(dev.ok()) << "round " << i << ": " << dev.status().ToString();
    ASSERT_TRUE(backend_->Free(*dev).ok());
  }
}

using SimBackendDeathTest = SimBackendTest;

TEST_F(SimBackendDeathTest, ACpuTouchOfDeviceMemoryFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Result<void*> dev = backend_->Allocate(0, 4096);
  ASSERT_TRUE(dev.ok());
  volatile char* p = static_cast<volatile char*>(*dev);
  EXPECT_DEATH({ p[10] = 1; }, "");
  EXPECT_DEATH({ [[maybe_unused]] char c = p[0]; }, "");
  EXPECT_TRUE(backend_->Free(*dev).ok());
}

TEST_F(SimBackendTest, AnotherProcessOpensAnExportedAllocation) {
  constexpr std::size_t kLen = 1 << 20;
  Result<void*> dev = backend_->Allocate(0, kLen);
  ASSERT_TRUE(dev.ok());
  std::vector<char> host(kLen, 0x5a);
  CopySync(*dev, host.data(), kLen);
  Result<IpcHandle> h = backend_->ExportIpc(*dev);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(backend_->ExportIpc(static_cast<char*>(*dev) + 1).status().code(),
            StatusCode::kInvalidArgument);

  const std::string env = std::string(kChildEnv) + "=" + Hex(*h);
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) {
    envp.push_back(*e);
  }
  envp.push_back(const_cast<char*>(env.c_str()));
  envp.push_back(nullptr);
  char exe[] = "/proc/self/exe";
  char* argv[] = {exe, nullptr};
  pid_t pid = 0;
  ASSERT_EQ(::posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, envp.data()), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0) << "child failed at step " << WEXITSTATUS(status);

  std::vector<char> back(kLen, 0);
  CopySync(back.data(), *dev, kLen);
  EXPECT_EQ(back, std::vector<char>(kLen, static_cast<char>(0xa5)));
  EXPECT_TRUE(backend_->Free(*dev).ok());
}

}  // namespace
}  // namespace sluice::device
