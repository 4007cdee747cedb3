// Frame integrity and payload encryption on the engine's tcp connections:
// the seal itself, then whole engines behind a tap that reads and alters
// the bytes between them, as someone on the network path could.
#include "transfer/frame_seal.h"

#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "gtest/gtest.h"

#include "common/mutex.h"
#include "common/net.h"
#include "transfer/testing/engine_pair.h"

namespace sluice::testing {
namespace {

using internal::FrameSeal;
using internal::FrameType;
using internal::UniqueFd;
using internal::WireHeader;
using namespace std::chrono_literals;

using Nonce = std::array<std::uint8_t, internal::kNonceBytes>;

struct Ends {
  std::unique_ptr<FrameSeal> client, server;
};

Ends MakeEnds(bool client_encrypts, bool server_encrypts) {
  Nonce sn{}, cn{};
  sn[0] = 1;
  cn[0] = 2;
  auto c = FrameSeal::Create("secret", sn, cn, client_encrypts, true);
  auto s = FrameSeal::Create("secret", sn, cn, server_encrypts, false);
  EXPECT_TRUE(c.ok() && s.ok());
  return {std::move(*c), std::move(*s)};
}

using Seal = std::array<std::uint8_t, FrameSeal::kMaxSealBytes>;

TEST(FrameSealTest, TheOtherEndAcceptsEachFrameOnceInOrder) {
  Ends e = MakeEnds(false, false);
  ASSERT_EQ(e.client->bytes(), FrameSeal::kMacBytes);
  WireHeader h = internal::MakeHeader(FrameType::kNotify, 0, 5);
  Seal first{}, second{};
  ASSERT_TRUE(e.client->Seal(h, "hello", nullptr, nullptr, 0, first.data()).ok());
  ASSERT_TRUE(e.client->Seal(h, "hello", nullptr, nullptr, 0, second.data()).ok());
  EXPECT_NE(first, second);  // Frame numbers differ: same bytes, new MAC.
  EXPECT_TRUE(e.server->Check(h, first.data(), "hello").ok());
  // Replaying the first frame in the second's place fails.
  EXPECT_EQ(e.server->Check(h, first.data(), "hello").status().code(),
            StatusCode::kPermissionDenied);
}

TEST(FrameSealTest, AnAlteredHeaderOrBodyFails) {
  for (int what = 0; what < 3; ++what) {
    Ends e = MakeEnds(false, false);
    WireHeader h = internal::MakeHeader(FrameType::kWriteReq, 9, 4096);
    h.key = 7;
    h.offset = 1 << 20;
    Seal seal{};
    ASSERT_TRUE(e.client->Seal(h, {}, nullptr, nullptr, 4096, seal.data()).ok());
    if (what == 0) {
      h.offset += 1;  // Moved to another place in the region.
    } else if (what == 1) {
      h.key = 8;  // Aimed at another region.
    } else {
      seal[3] ^= 0x40;  // The MAC itself.
    }
    Result<std::uint64_t> n = e.server->Check(h, seal.data(), {});
    EXPECT_EQ(n.status().code(), StatusCode::kPermissionDenied) << what;
  }
  // A server's body, altered.
  Ends e = MakeEnds(false, false);
  WireHeader ack = internal::MakeHeader(FrameType::kWriteAck, 1, 6);
  ack.status = 5;
  Seal seal{};
  ASSERT_TRUE(e.server->Seal(ack, "denied", nullptr, nullptr, 0, seal.data()).ok());
  EXPECT_FALSE(e.client->Check(ack, seal.data(), "allowd").ok());
}

TEST(FrameSealTest, EncryptedPayloadRoundTripsAndAlteredCiphertextFails) {
  Ends e = MakeEnds(true, true);
  ASSERT_EQ(e.client->bytes(), FrameSeal::kMaxSealBytes);
  std::vector<char> plain(100000);
  for (std::size_t i = 0; i < plain.size(); ++i) {
    plain[i] = PatternByte(3, i);
  }
  for (bool alter : {false, true}) {
    WireHeader h = internal::MakeHeader(FrameType::kWriteReq, 1, plain.size());
    std::vector<char> wire(plain.size());
    Seal seal{};
    ASSERT_TRUE(e.client->Seal(h, {}, plain.data(), wire.data(), plain.size(), seal.data()).ok());
    EXPECT_NE(std::memcmp(wire.data(), plain.data(), 64), 0);  // Not the plaintext.
    Result<std::uint64_t> n = e.server->Check(h, seal.data(), {});
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    if (alter) {
      wire[777] ^= 1;
    }
    Status opened = e.server->OpenPayload(*n, h, seal.data(), wire.data(), wire.size());
    if (alter) {
      EXPECT_EQ(opened.code(), StatusCode::kPermissionDenied) << opened.ToString();
    } else {
      ASSERT_TRUE(opened.ok()) << opened.ToString();
      EXPECT_EQ(wire, plain);
    }
  }
}

// A client asking for encryption and a server that did not see the ask
// (stripped in transit) derive different keys: the first frame fails.
TEST(FrameSealTest, StrippingTheEncryptionAskBreaksTheSession) {
  Ends e = MakeEnds(true, false);
  WireHeader h = internal::MakeHeader(FrameType::kNotify, 0, 2);
  Seal seal{};
  ASSERT_TRUE(e.client->Seal(h, "hi", nullptr, nullptr, 0, seal.data()).ok());
  EXPECT_FALSE(e.server->Check(h, seal.data(), "hi").ok());
}

// A tcp relay between an initiator and a target that keeps what passes
// (up to 16 MiB each way) and can flip one bit of the first data frame's
// header (its offset) after the hello.
class WireTap {
 public:
  WireTap(const std::string& target, bool alter_first_write)
      : target_(target), alter_(alter_first_write) {
    std::uint16_t port = 0;
    auto l = internal::Listen({"127.0.0.1", 0}, &port);
    EXPECT_TRUE(l.ok());
    listener_ = std::move(*l);
    endpoint_ = "127.0.0.1:" + std::to_string(port);
    thread_ = std::thread([this] { Run(); });
  }
  ~WireTap() {
    stop_ = true;
    thread_.join();
  }
  const std::string& endpoint() const { return endpoint_; }
  // Whether `needle` passed in either direction.
  bool Saw(std::string_view needle) {
    MutexLock lock(mu_);
    return c2s_.find(needle) != std::string::npos || s2c_.find(needle) != std::string::npos;
  }

 private:
  void Run() {
    pollfd lp{listener_.get(), POLLIN, 0};
    while (!stop_ && ::poll(&lp, 1, 50) == 0) {
    }
    if (stop_) {
      return;
    }
    UniqueFd client(::accept(listener_.get(), nullptr, nullptr));
    auto hp = internal::ParseHostPort(target_, false);
    auto server = internal::ConnectTcp(*hp, 2000ms);
    if (!client.valid() || !server.ok()) {
      ADD_FAILURE() << "tap could not connect";
      return;
    }
    pollfd fds[2] = {{client.get(), POLLIN, 0}, {server->get(), POLLIN, 0}};
    char buf[65536];
    while (!stop_) {
      if (::poll(fds, 2, 50) <= 0) {
        continue;
      }
      for (int i = 0; i < 2; ++i) {
        if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) {
          continue;
        }
        const ssize_t n = ::recv(fds[i].fd, buf, sizeof(buf), 0);
        if (n <= 0) {
          return;  // Either end closed: close both (destructors).
        }
        Pass(i == 0, buf, static_cast<std::size_t>(n));
        if (!internal::SendAll(fds[1 - i].fd, buf, static_cast<std::size_t>(n)).ok()) {
          return;
        }
      }
    }
  }

  // Records (and maybe alters) `n` bytes passing one way.
  void Pass(bool to_server, char* p, std::size_t n) {
    MutexLock lock(mu_);
    std::string& seen = to_server ? c2s_ : s2c_;
    const std::size_t at = seen.size();
    if (at < (16u << 20)) {
      seen.append(p, n);
    }
    if (!to_server || !alter_) {
      return;
    }
    // The client hello is 40 bytes and its body; the first data frame's
    // offset field is 24 bytes into the header after it.
    if (hello_end_ == 0 && seen.size() >= sizeof(WireHeader)) {
      WireHeader h;
      std::memcpy(&h, seen.data(), sizeof(h));
      hello_end_ = sizeof(WireHeader) + h.length;
    }
    const std::size_t target_byte = hello_end_ + 24;
    if (hello_end_ != 0 && !altered_ && target_byte >= at && target_byte < at + n) {
      p[target_byte - at] ^= 0x01;
      altered_ = true;
    }
  }

  const std::string target_;
  const bool alter_;
  UniqueFd listener_;
  std::string endpoint_;
  std::atomic<bool> stop_{false};
  Mutex mu_;
  std::string c2s_ SLUICE_GUARDED_BY(mu_), s2c_ SLUICE_GUARDED_BY(mu_);
  std::size_t hello_end_ SLUICE_GUARDED_BY(mu_) = 0;
  bool altered_ SLUICE_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

struct TappedPair {
  std::unique_ptr<TransferEngine> target, initiator;
  std::unique_ptr<WireTap> tap;
  TestBuffer remote, local;
  RegionKey rkey;
  SegmentId segment;
};

// A target and an initiator (one tcp connection) through a tap. `secret`
// empty: no seal.
std::unique_ptr<TappedPair> Tapped(const std::string& secret, bool encrypt, bool alter) {
  auto p = std::make_unique<TappedPair>();
  EngineConfig tc = ConfigFor(Mode::kTcp, false);
  EngineConfig ic = ConfigFor(Mode::kTcp, true);
  for (EngineConfig* c : {&tc, &ic}) {
    c->secret = secret;
    c->encrypt_data = encrypt;
    c->connections_per_peer = 1;
  }
  auto t = TransferEngine::Create(tc);
  auto i = TransferEngine::Create(ic);
  EXPECT_TRUE(t.ok() && i.ok());
  if (!t.ok() || !i.ok()) {
    return nullptr;
  }
  p->target = std::move(*t);
  p->initiator = std::move(*i);
  p->remote = TestBuffer::Anonymous(1 << 20);
  p->remote.Zero();
  p->local = TestBuffer::Anonymous(1 << 20);
  auto rk = p->target->RegisterMemory(p->remote.data(), p->remote.size(), MemoryKind::kHost,
                                      Access::kRemoteReadWrite);
  auto lk = p->initiator->RegisterMemory(p->local.data(), p->local.size(), MemoryKind::kHost,
                                         Access::kLocalOnly);
  EXPECT_TRUE(rk.ok() && lk.ok());
  p->rkey = *rk;
  p->tap = std::make_unique<WireTap>(p->target->endpoint(), alter);
  auto seg = p->initiator->OpenSegment(p->tap->endpoint());
  EXPECT_TRUE(seg.ok()) << seg.status().ToString();
  if (!seg.ok()) {
    return nullptr;
  }
  p->segment = *seg;
  return p;
}

Status Write(TappedPair& p, std::uint64_t offset, std::uint64_t len) {
  TransferRequest op{OpKind::kWrite,      p.local.data(), p.segment, p.rkey, offset, len,
                     TransportHint::kAuto};
  return p.initiator->TransferSync({&op, 1}, 10s);
}

// The tap moves the first write one byte along. Without a seal it lands
// there (the tap works); with one, the target refuses the frame and no
// byte of it lands anywhere.
TEST(FrameSealEngineTest, AWriteAlteredOnTheWireIsRefusedAndLandsNowhere) {
  for (const std::string secret : {"", "tap-test-secret-0123456789"}) {
    SCOPED_TRACE(secret.empty() ? "no secret" : "secret");
    auto p = Tapped(secret, false, /*alter=*/true);
    ASSERT_NE(p, nullptr);
    p->local.Fill(11);
    Status s = Write(*p, 4096, 4096);
    if (secret.empty()) {
      ASSERT_TRUE(s.ok()) << s.ToString();
      EXPECT_TRUE(p->remote.Holds(4097, 4096, 11, 0));  // Moved by the tap.
      continue;
    }
    EXPECT_FALSE(s.ok());
    for (std::size_t off :
         {std::size_t{4095}, std::size_t{4096}, std::size_t{4097}, std::size_t{8192}}) {
      EXPECT_EQ(p->remote.ByteAt(off), 0) << off;
    }
  }
}

// With encrypt_data neither a write's nor a read's bytes cross the wire as
// they are; without it (the control) they do.
TEST(FrameSealEngineTest, EncryptedPayloadIsNotOnTheWire) {
  for (bool encrypt : {false, true}) {
    SCOPED_TRACE(encrypt ? "encrypted" : "sealed only");
    auto p = Tapped("tap-test-secret-0123456789", encrypt, false);
    ASSERT_NE(p, nullptr);
    p->local.Fill(21);
    ASSERT_TRUE(Write(*p, 0, 256 << 10).ok());
    ASSERT_TRUE(p->remote.Holds(0, 256 << 10, 21, 0));
    p->remote.FillRange(512 << 10, 256 << 10, 22, 0);
    TransferRequest read{OpKind::kRead, p->local.data(), p->segment,          p->rkey,
                         512 << 10,     256 << 10,       TransportHint::kAuto};
    ASSERT_TRUE(p->initiator->TransferSync({&read, 1}, 10s).ok());
    ASSERT_TRUE(p->local.Holds(0, 256 << 10, 22, 0));
    std::string written(64, '\0'), read_back(64, '\0');
    for (std::size_t i = 0; i < 64; ++i) {
      written[i] = PatternByte(21, 100000 + i);
      read_back[i] = PatternByte(22, 100000 + i);
    }
    EXPECT_EQ(p->tap->Saw(written), !encrypt);
    EXPECT_EQ(p->tap->Saw(read_back), !encrypt);
  }
}

TEST(FrameSealEngineTest, ATargetThatEncryptsRefusesAnInitiatorThatDoesNot) {
  EngineConfig tc = ConfigFor(Mode::kTcp, false);
  tc.secret = "tap-test-secret-0123456789";
  tc.encrypt_data = true;
  EngineConfig ic = ConfigFor(Mode::kTcp, true);
  ic.secret = tc.secret;
  auto t = TransferEngine::Create(tc);
  auto i = TransferEngine::Create(ic);
  ASSERT_TRUE(t.ok() && i.ok());
  Result<SegmentId> seg = (*i)->OpenSegment((*t)->endpoint());
  EXPECT_EQ(seg.status().code(), StatusCode::kFailedPrecondition) << seg.status().ToString();
  EXPECT_NE(seg.status().message().find("encrypt"), std::string_view::npos);
  EngineConfig bad = ConfigFor(Mode::kTcp, true);
  bad.encrypt_data = true;  // No secret to key it.
  auto e = TransferEngine::Create(bad);
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("secret"), std::string_view::npos);
}

}  // namespace
}  // namespace sluice::testing
