// FrameConn's read side on a socket that already holds a whole frame: the
// frame completes however its bytes fall across the bounded reads of one
// readiness event.
#include "transfer/control/frame_conn.h"

#include <sys/epoll.h>
#include <sys/socket.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "common/mutex.h"

namespace sluice::internal {
namespace {

using namespace std::chrono_literals;

// Drains every frame's bytes and counts the frames that complete.
class DrainConn final : public FrameConn {
 public:
  DrainConn(UniqueFd fd, EventLoop* loop) : FrameConn(std::move(fd), loop, "test peer", 30s) {}

  void Start() { Watch(EPOLLIN); }

  // Waits up to `timeout` for `n` whole frames; answers how many came.
  int WaitForFrames(int n, std::chrono::milliseconds timeout) {
    MutexLock lock(mu_);
    cv_.WaitFor(lock, timeout, [&]() SLUICE_REQUIRES(mu_) { return frames_ >= n || closed_; });
    return frames_;
  }

  std::uint64_t drained() {
    MutexLock lock(mu_);
    return drained_;
  }

 protected:
  Status OnHeader(const WireHeader& h, Sink* sink, std::uint64_t* follow) override {
    sink->kind = Sink::Kind::kDrain;
    *follow = h.length;
    MutexLock lock(mu_);
    drained_ += h.length;
    return Status::Ok();
  }
  Status OnFrame(const WireHeader& /*h*/, std::string_view /*body*/) override {
    {
      MutexLock lock(mu_);
      ++frames_;
    }
    cv_.NotifyAll();
    return Status::Ok();
  }
  void OnClosed(const Status& /*why*/) override {
    {
      MutexLock lock(mu_);
      closed_ = true;
    }
    cv_.NotifyAll();
  }
  bool AwaitingPeer() const override { return false; }

 private:
  Mutex mu_;
  CondVar cv_;
  int frames_ SLUICE_GUARDED_BY(mu_) = 0;
  bool closed_ SLUICE_GUARDED_BY(mu_) = false;
  std::uint64_t drained_ SLUICE_GUARDED_BY(mu_) = 0;
};

// Writes all of `bytes` without blocking: the socket must take them whole.
void WriteWhole(int fd, const std::vector<char>& bytes) {
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n =
        ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    ASSERT_GT(n, 0) << "the socket took " << sent << " of " << bytes.size()
                    << " bytes: " << std::strerror(errno);
    sent += static_cast<std::size_t>(n);
  }
}

// The frame's last bytes arrive in the last read one event allows, and the
// peer then sends nothing more (it waits for the answer): they must not sit
// in the buffer until the stall timeout.
TEST(FrameConnTest, AFrameEndingInAnEventsLastReadCompletes) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  UniqueFd ours(sv[0]);
  UniqueFd theirs(sv[1]);
  const int room = 16 << 20;  // Beyond wmem_max only as root; 2x4 MiB is enough.
  if (::setsockopt(theirs.get(), SOL_SOCKET, SO_SNDBUFFORCE, &room, sizeof(room)) != 0) {
    ASSERT_EQ(::setsockopt(theirs.get(), SOL_SOCKET, SO_SNDBUF, &room, sizeof(room)), 0);
  }
  ASSERT_TRUE(SetNonBlocking(ours.get(), true).ok());

  // Exactly kReadRounds full reads: header and payload fill the last one.
  const std::uint64_t total = FrameConn::kReadRounds * FrameConn::kInBufSize;
  const std::uint64_t payload = total - sizeof(WireHeader);
  WireHeader h = MakeHeader(FrameType::kWriteReq, 1, payload);
  std::vector<char> bytes(total, 'x');
  std::memcpy(bytes.data(), &h, sizeof(h));
  WriteWhole(theirs.get(), bytes);
  if (::testing::Test::HasFatalFailure()) {
    return;
  }

  auto loop = EventLoop::Create("frame-conn-test");
  ASSERT_TRUE(loop.ok());
  auto conn = std::make_shared<DrainConn>(std::move(ours), loop->get());
  conn->Start();
  EXPECT_EQ(conn->WaitForFrames(1, 10s), 1) << "the frame's tail stayed in the read buffer";
  EXPECT_EQ(conn->drained(), payload);

  // A second, small frame on the same connection is read as well.
  WireHeader small = MakeHeader(FrameType::kWriteReq, 2, 100);
  std::vector<char> more(sizeof(small) + 100, 'y');
  std::memcpy(more.data(), &small, sizeof(small));
  WriteWhole(theirs.get(), more);
  EXPECT_EQ(conn->WaitForFrames(2, 10s), 2);
  (*loop)->Stop();
}

}  // namespace
}  // namespace sluice::internal
