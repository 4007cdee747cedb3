// What every device backend does: copies host<->device and device<->device,
// asynchronous and in order per stream, events, pointer attributes, refusals
// naming what is wrong, and IPC handles another process opens.
#include "device/testing/backend_conformance.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "device/cuda_backend.h"
#include "device/sim_backend.h"

extern char** environ;

namespace sluice::device::testing {

using namespace std::chrono_literals;

Result<std::unique_ptr<DeviceBackend>> MakeTestBackend(const std::string& name) {
  if (name == "sim") {
    return MakeSimBackend(SimOptions{2, std::size_t{64} << 20});
  }
  if (name == "cuda") {
    return MakeCudaBackend();
  }
  return InvalidArgumentError("no test backend " + name);
}

namespace {

// The IPC child is this test binary re-executed with kChildEnv set to
// "<backend>:<hex handle>".
constexpr char kChildEnv[] = "SLUICE_DEVICE_IPC_CHILD";

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
// parent left (all 0x5a), writes 0xa5 over them. Its exit code names the
// step that failed.
int RunIpcChild(const std::string& arg) {
  const std::size_t colon = arg.find(':');
  if (colon == std::string::npos) {
    return 9;
  }
  auto backend = MakeTestBackend(arg.substr(0, colon));
  if (!backend.ok()) {
    return 10;
  }
  DeviceBackend& b = **backend;
  Result<void*> dev = b.OpenIpc(FromHex(arg.substr(colon + 1)));
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
  if (const char* arg = std::getenv(kChildEnv)) {
    std::_Exit(RunIpcChild(arg));
  }
  return false;
}();

}  // namespace

void BackendConformanceTest::SetUp() {
  auto b = MakeTestBackend(GetParam());
  if (!b.ok() && (b.status().code() == StatusCode::kUnavailable ||
                  b.status().code() == StatusCode::kUnimplemented)) {
    GTEST_SKIP() << "no " << GetParam() << " device here: " << b.status().ToString();
  }
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  backend_ = std::move(*b);
  auto s = backend_->CreateStream(0);
  auto e = backend_->CreateEvent();
  ASSERT_TRUE(s.ok() && e.ok());
  stream_ = *s;
  event_ = *e;
}

void BackendConformanceTest::CopySync(void* dst, const void* src, std::size_t len) {
  ASSERT_TRUE(backend_->CopyAsync(dst, src, len, stream_).ok());
  ASSERT_TRUE(backend_->Record(event_, stream_).ok());
  ASSERT_TRUE(backend_->Wait(event_, 5s).ok());
}

namespace {

TEST_P(BackendConformanceTest, CopiesMoveBytesHostToDeviceDeviceToDeviceAndBack) {
  constexpr std::size_t kLen = 3 << 20;
  Result<void*> a = backend_->Allocate(0, kLen);
  Result<void*> b = backend_->Allocate(OtherDevice(), kLen);
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

TEST_P(BackendConformanceTest, CopiesOnAStreamCompleteInOrderAndAsynchronously) {
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

TEST_P(BackendConformanceTest, AnEventNeverRecordedIsDoneAndStreamsOfTwoDevicesShareIt) {
  Result<Event> fresh = backend_->CreateEvent();
  ASSERT_TRUE(fresh.ok());
  Result<bool> done = backend_->Query(*fresh);
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(*done);
  Result<Stream> other = backend_->CreateStream(OtherDevice());
  ASSERT_TRUE(other.ok());
  Result<void*> dev = backend_->Allocate(OtherDevice(), 4096);
  ASSERT_TRUE(dev.ok());
  std::vector<char> in(4096, 3), out(4096, 0);
  // One event recorded on a stream of each device in turn.
  for (Stream s : {stream_, *other, stream_}) {
    ASSERT_TRUE(backend_->CopyAsync(*dev, in.data(), in.size(), s).ok());
    ASSERT_TRUE(backend_->CopyAsync(out.data(), *dev, out.size(), s).ok());
    ASSERT_TRUE(backend_->Record(*fresh, s).ok());
    ASSERT_TRUE(backend_->Wait(*fresh, 5s).ok());
    EXPECT_EQ(out, in);
    in.assign(in.size(), static_cast<char>(in[0] + 1));
  }
  EXPECT_TRUE(backend_->DestroyEvent(*fresh).ok());
  EXPECT_TRUE(backend_->DestroyStream(*other).ok());
  EXPECT_TRUE(backend_->Free(*dev).ok());
}

TEST_P(BackendConformanceTest, AttributesSayWhatAPointerIs) {
  Result<void*> dev = backend_->Allocate(OtherDevice(), 10000);
  ASSERT_TRUE(dev.ok());
  Result<PointerInfo> in = backend_->Attributes(static_cast<char*>(*dev) + 123);
  ASSERT_TRUE(in.ok());
  EXPECT_EQ(in->kind, MemoryKind::kDevice);
  EXPECT_EQ(in->device, OtherDevice());
  EXPECT_EQ(in->base, *dev);
  EXPECT_EQ(in->length, 10000u);
  int on_stack = 0;
  Result<PointerInfo> host = backend_->Attributes(&on_stack);
  ASSERT_TRUE(host.ok());
  EXPECT_EQ(host->kind, MemoryKind::kHost);
  EXPECT_EQ(host->device, -1);
  EXPECT_TRUE(backend_->Free(*dev).ok());
}

TEST_P(BackendConformanceTest, BadArgumentsAreRefusedNamingWhatIsWrong) {
  EXPECT_EQ(backend_->Allocate(backend_->DeviceCount(), 4096).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->Allocate(0, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->CreateStream(-1).status().code(), StatusCode::kInvalidArgument);
  Result<void*> dev = backend_->Allocate(0, 4096);
  ASSERT_TRUE(dev.ok());
  char host[8192];
  Status past = backend_->CopyAsync(host, *dev, sizeof(host), stream_);
  EXPECT_EQ(past.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(past.message().find("runs past"), std::string_view::npos) << past.ToString();
  EXPECT_EQ(backend_->CopyAsync(host, nullptr, 16, stream_).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->CopyAsync(host, *dev, 16, Stream{999}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->Record(Event{999}, stream_).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->Free(static_cast<char*>(*dev) + 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->FreePinned(host).code(), StatusCode::kInvalidArgument);
  IpcHandle junk;
  EXPECT_EQ(backend_->OpenIpc(junk).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->CloseIpc(*dev).code(), StatusCode::kInvalidArgument) << "not opened";
  EXPECT_TRUE(backend_->Free(*dev).ok());
  EXPECT_EQ(backend_->Free(*dev).code(), StatusCode::kInvalidArgument) << "freed twice";
}

TEST_P(BackendConformanceTest, AnotherProcessOpensAnExportedAllocation) {
  constexpr std::size_t kLen = 1 << 20;
  Result<void*> dev = backend_->Allocate(0, kLen);
  ASSERT_TRUE(dev.ok());
  std::vector<char> host(kLen, 0x5a);
  CopySync(*dev, host.data(), kLen);
  Result<IpcHandle> h = backend_->ExportIpc(*dev);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(backend_->ExportIpc(static_cast<char*>(*dev) + 1).status().code(),
            StatusCode::kInvalidArgument);

  const std::string env = std::string(kChildEnv) + "=" + GetParam() + ":" + Hex(*h);
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
}  // namespace sluice::device::testing
