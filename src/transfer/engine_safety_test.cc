// Bad input from every side: malformed frames and handshakes on the wire,
// invalid config and API arguments. Each must fail with a clear, specific
// error while the engine keeps serving everyone else.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "gtest/gtest.h"

#include "common/net.h"
#include "transfer/shm/shm_peer.h"
#include "transfer/testing/engine_pair.h"
#include "transfer/wire.h"

namespace sluice::testing {
namespace {

using internal::FrameType;
using internal::HostPort;
using internal::UniqueFd;
using internal::WireHeader;
using namespace std::chrono_literals;

UniqueFd RawConnect(const std::string& endpoint) {
  auto hp = internal::ParseHostPort(endpoint, false);
  auto fd = internal::ConnectTcp(*hp, 2000ms);
  EXPECT_TRUE(fd.ok()) << fd.status().ToString();
  (void)internal::SetIoTimeout(fd->get(), 3000ms);
  return std::move(*fd);
}

// True if the peer closes the connection (EOF or reset) within the timeout.
bool ClosedByPeer(int fd) {
  char buf[4096];
  while (true) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) {
      return true;
    }
    if (n < 0) {
      return false;  // Timed out: still open.
    }
  }
}

bool ReadFrame(int fd, WireHeader* h, std::string* body) {
  if (!internal::RecvAll(fd, h, sizeof(*h)).ok()) {
    return false;
  }
  body->resize(h->length);
  return internal::RecvAll(fd, body->data(), body->size()).ok();
}

// Performs a valid handshake (no secret) by hand.
UniqueFd RawHandshake(const std::string& endpoint) {
  UniqueFd fd = RawConnect(endpoint);
  WireHeader h;
  std::string body;
  EXPECT_TRUE(ReadFrame(fd.get(), &h, &body));
  internal::ClientHello hello;  // Zero MAC = no secret.
  hello.endpoint = "raw-test";
  const std::string out = internal::EncodeClientHello(hello);
  WireHeader oh = internal::MakeHeader(FrameType::kClientHello, 0, out.size());
  EXPECT_TRUE(internal::SendAll(fd.get(), &oh, sizeof(oh)).ok());
  EXPECT_TRUE(internal::SendAll(fd.get(), out.data(), out.size()).ok());
  EXPECT_TRUE(ReadFrame(fd.get(), &h, &body));
  EXPECT_EQ(h.type, static_cast<std::uint8_t>(FrameType::kHelloOk));
  return fd;
}

class EngineSafetyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pair_ = EnginePair::Make(Mode::kTcp);
    ASSERT_NE(pair_, nullptr);
    remote_ = pair_->TargetBuffer(1 << 20, Access::kRemoteReadWrite, &rkey_);
    local_ = pair_->LocalBuffer(1 << 20, &lkey_);
  }

  // A good client still gets service.
  void ExpectEngineServes() {
    TransferRequest op{OpKind::kWrite, local_.data(),       pair_->segment, rkey_, 0,
                       1 << 20,        TransportHint::kAuto};
    Status s = pair_->initiator->TransferSync({&op, 1}, 10s);
    EXPECT_TRUE(s.ok()) << s.ToString();
  }

  std::unique_ptr<EnginePair> pair_;
  RegionKey rkey_, lkey_;
  TestBuffer remote_, local_;
};

TEST_F(EngineSafetyTest, GarbageOnThePortClosesOnlyThatConnection) {
  UniqueFd fd = RawConnect(pair_->target->endpoint());
  std::mt19937 rng(7);
  std::string junk(4096, '\0');
  for (char& c : junk) {
    c = static_cast<char>(rng());
  }
  (void)internal::SendAll(fd.get(), junk.data(), junk.size());
  EXPECT_TRUE(ClosedByPeer(fd.get()));
  ExpectEngineServes();
}

TEST_F(EngineSafetyTest, DataFrameBeforeTheHandshakeIsRefused) {
  UniqueFd fd = RawConnect(pair_->target->endpoint());
  WireHeader h = internal::MakeHeader(FrameType::kWriteReq, 1, 8);
  h.key = rkey_.value;
  (void)internal::SendAll(fd.get(), &h, sizeof(h));
  (void)internal::SendAll(fd.get(), "12345678", 8);
  EXPECT_TRUE(ClosedByPeer(fd.get()));
  EXPECT_EQ(remote_.data()[0], '\0') << "an unauthenticated write touched memory";
  ExpectEngineServes();
}

TEST_F(EngineSafetyTest, WrongProtocolVersionGetsAClearRejection) {
  UniqueFd fd = RawConnect(pair_->target->endpoint());
  WireHeader h;
  std::string body;
  ASSERT_TRUE(ReadFrame(fd.get(), &h, &body));
  WireHeader bad = internal::MakeHeader(FrameType::kClientHello, 0, 0);
  bad.version = 99;
  ASSERT_TRUE(internal::SendAll(fd.get(), &bad, sizeof(bad)).ok());
  ASSERT_TRUE(ReadFrame(fd.get(), &h, &body));
  EXPECT_EQ(h.type, static_cast<std::uint8_t>(FrameType::kError));
  EXPECT_EQ(h.status, static_cast<std::uint16_t>(StatusCode::kFailedPrecondition));
  EXPECT_NE(body.find("protocol version 99"), std::string::npos) << body;
  EXPECT_TRUE(ClosedByPeer(fd.get()));
  ExpectEngineServes();
}

TEST_F(EngineSafetyTest, OversizedLengthClosesTheConnection) {
  UniqueFd fd = RawHandshake(pair_->target->endpoint());
  WireHeader h = internal::MakeHeader(FrameType::kWriteReq, 1, std::uint64_t{1} << 40);
  h.key = rkey_.value;
  ASSERT_TRUE(internal::SendAll(fd.get(), &h, sizeof(h)).ok());
  EXPECT_TRUE(ClosedByPeer(fd.get()));
  ExpectEngineServes();
}

TEST_F(EngineSafetyTest, RejectedWriteIsDrainedAndTheConnectionLives) {
  UniqueFd fd = RawHandshake(pair_->target->endpoint());
  WireHeader h = internal::MakeHeader(FrameType::kWriteReq, 1, 16);
  h.key = rkey_.value ^ 1;  // Unknown key.
  ASSERT_TRUE(internal::SendAll(fd.get(), &h, sizeof(h)).ok());
  ASSERT_TRUE(internal::SendAll(fd.get(), "0123456789abcdef", 16).ok());
  WireHeader ack;
  std::string body;
  ASSERT_TRUE(ReadFrame(fd.get(), &ack, &body));
  EXPECT_EQ(ack.type, static_cast<std::uint8_t>(FrameType::kWriteAck));
  EXPECT_EQ(ack.status, static_cast<std::uint16_t>(StatusCode::kNotFound));
  // Same connection, valid write: the payload of the rejected one was skipped.
  h = internal::MakeHeader(FrameType::kWriteReq, 2, 4);
  h.key = rkey_.value;
  h.offset = 100;
  ASSERT_TRUE(internal::SendAll(fd.get(), &h, sizeof(h)).ok());
  ASSERT_TRUE(internal::SendAll(fd.get(), "WXYZ", 4).ok());
  ASSERT_TRUE(ReadFrame(fd.get(), &ack, &body));
  EXPECT_EQ(ack.status, 0);
  EXPECT_EQ(ack.request_id, 2u);
  EXPECT_EQ(std::memcmp(remote_.data() + 100, "WXYZ", 4), 0);
}

TEST(EngineAuthTest, WrongSecretIsPermissionDeniedAndRightSecretWorks) {
  EngineConfig tc = ConfigFor(Mode::kTcp, false);
  tc.secret = "correct horse";
  auto target = TransferEngine::Create(tc);
  ASSERT_TRUE(target.ok());
  for (const std::string secret : {"battery staple", ""}) {
    EngineConfig ic = ConfigFor(Mode::kTcp, true);
    ic.secret = secret;
    auto init = TransferEngine::Create(ic);
    ASSERT_TRUE(init.ok());
    Result<SegmentId> seg = (*init)->OpenSegment((*target)->endpoint());
    EXPECT_EQ(seg.status().code(), StatusCode::kPermissionDenied) << seg.status().ToString();
  }
  EngineConfig ic = ConfigFor(Mode::kTcp, true);
  ic.secret = "correct horse";
  auto init = TransferEngine::Create(ic);
  ASSERT_TRUE(init.ok());
  EXPECT_TRUE((*init)->OpenSegment((*target)->endpoint()).ok());
}

TEST(EngineConfigTest, BadFieldsAreNamed) {
  auto expect_bad = [](EngineConfig c, std::string_view field) {
    auto e = TransferEngine::Create(c);
    ASSERT_FALSE(e.ok());
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(e.status().message().find(field), std::string_view::npos) << e.status().ToString();
  };
  EngineConfig c;
  c.transports = {"rdma-magic"};
  expect_bad(c, "transports");
  c = EngineConfig{};
  c.transports = {};
  expect_bad(c, "transports");
  c = EngineConfig{};
  c.io_threads = 0;
  expect_bad(c, "io_threads");
  c = EngineConfig{};
  c.connections_per_peer = 1000;
  expect_bad(c, "connections_per_peer");
  c = EngineConfig{};
  c.slice_size = 1;
  expect_bad(c, "slice_size");
  c = EngineConfig{};
  c.listen = "127.0.0.1";
  expect_bad(c, "port");
  c = EngineConfig{};
  c.handshake_timeout = std::chrono::milliseconds(0);
  expect_bad(c, "handshake_timeout");
  c = EngineConfig{};
  c.max_pending_handshakes = 0;
  expect_bad(c, "max_pending_handshakes");
}

TEST_F(EngineSafetyTest, RegistrationArgumentsAreChecked) {
  TransferEngine& e = *pair_->initiator;
  EXPECT_EQ(e.RegisterMemory(nullptr, 10, MemoryKind::kHost, Access::kRemoteRead).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(e.RegisterMemory(local_.data() + 10, 10, MemoryKind::kHost, Access::kRemoteRead)
                .status()
                .code(),
            StatusCode::kAlreadyExists);
  EXPECT_EQ(
      e.RegisterMemory(local_.data(), 10, MemoryKind::kDevice, Access::kRemoteRead).status().code(),
      StatusCode::kUnimplemented);
  EXPECT_EQ(e.UnregisterMemory(RegionKey{12345}).code(), StatusCode::kNotFound);
  EXPECT_EQ(e.AllocateShared(0).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(EngineSafetyTest, SubmitRejectsBadBatchesUpFrontWithoutCallingBack) {
  TransferEngine& e = *pair_->initiator;
  bool called = false;
  auto cb = [&](const Status&) { called = true; };
  EXPECT_EQ(e.Submit({}, cb).status().code(), StatusCode::kInvalidArgument);
  char unregistered[64];
  TransferRequest op{OpKind::kWrite,      unregistered, pair_->segment, rkey_, 0, 64,
                     TransportHint::kAuto};
  EXPECT_EQ(e.Submit({&op, 1}, cb).status().code(), StatusCode::kInvalidArgument);
  op.local = local_.data();
  op.length = 0;
  EXPECT_EQ(e.Submit({&op, 1}, cb).status().code(), StatusCode::kInvalidArgument);
  op.length = 64;
  op.segment = SegmentId{999};
  EXPECT_EQ(e.Submit({&op, 1}, cb).status().code(), StatusCode::kInvalidArgument);
  op.segment = pair_->segment;
  op.hint = TransportHint::kSameHostOnly;  // This initiator has tcp only.
  EXPECT_EQ(e.Submit({&op, 1}, cb).status().code(), StatusCode::kFailedPrecondition);
  // A half-valid batch pins nothing: the local region can be unregistered.
  TransferRequest ops[2] = {op, op};
  ops[0].hint = ops[1].hint = TransportHint::kAuto;
  ops[1].local = unregistered;
  EXPECT_EQ(e.Submit(ops, cb).status().code(), StatusCode::kInvalidArgument);
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(called);
  EXPECT_TRUE(e.UnregisterMemory(lkey_).ok());
}

TEST_F(EngineSafetyTest, NotifyAndOpenSegmentArgumentsAreChecked) {
  TransferEngine& e = *pair_->initiator;
  EXPECT_EQ(e.Notify(pair_->segment, {}).code(), StatusCode::kInvalidArgument);
  std::vector<std::byte> big(EngineConfig{}.max_notify_bytes + 1);
  EXPECT_EQ(e.Notify(pair_->segment, big).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(e.OpenSegment("no-port").status().code(), StatusCode::kInvalidArgument);
  std::uint16_t port = 0;
  { auto l = internal::Listen({"127.0.0.1", 0}, &port); }
  Result<SegmentId> dead = e.OpenSegment("127.0.0.1:" + std::to_string(port));
  EXPECT_EQ(dead.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(dead.status().scope(), FailureScope::kEndpoint);
}

TEST_F(EngineSafetyTest, TableChangesArePushedToOpenSegments) {
  TestBuffer extra = TestBuffer::Anonymous(4096);
  auto key =
      pair_->target->RegisterMemory(extra.data(), 4096, MemoryKind::kHost, Access::kRemoteRead);
  ASSERT_TRUE(key.ok());
  EXPECT_TRUE(pair_->AwaitRemoteKey(*key));
  ASSERT_TRUE(pair_->target->UnregisterMemory(*key).ok());
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  bool gone = false;
  while (!gone && std::chrono::steady_clock::now() < deadline) {
    auto regions = pair_->initiator->SegmentRegions(pair_->segment);
    gone = regions.ok() && std::none_of(regions->begin(), regions->end(),
                                        [&](const RegionInfo& r) { return r.key == *key; });
  }
  EXPECT_TRUE(gone);
}

// A fake target's hello: this very host (as same-host peers present it)
// and a table holding `r` alone.
internal::HelloOk ClaimingThisHost(const internal::WireRegion& r) {
  internal::HelloOk ok;
  ok.host = internal::HostInfo::Self();
  ok.table.version = 1;
  ok.table.regions.push_back(r);
  return ok;
}

// A fake target: accepts one connection on `listen_fd` and answers the
// handshake with `ok` (its host and region table), then returns the
// connection.
UniqueFd AcceptAndGreet(int listen_fd, const internal::HelloOk& ok) {
  internal::SetNonBlocking(listen_fd, false).ok();
  UniqueFd conn(::accept(listen_fd, nullptr, nullptr));
  std::array<std::uint8_t, internal::kNonceBytes> nonce{};
  WireHeader h = internal::MakeHeader(FrameType::kServerHello, 0, nonce.size());
  (void)internal::SendAll(conn.get(), &h, sizeof(h));
  (void)internal::SendAll(conn.get(), nonce.data(), nonce.size());
  std::string body;
  ReadFrame(conn.get(), &h, &body);
  const std::string hello = internal::EncodeHelloOk(ok);
  h = internal::MakeHeader(FrameType::kHelloOk, 0, hello.size());
  (void)internal::SendAll(conn.get(), &h, sizeof(h));
  (void)internal::SendAll(conn.get(), hello.data(), hello.size());
  return conn;
}

TEST(EngineMapTest, MapPeerMemoryMapsASharedAllocationAndNamesWhatItCannotMap) {
  auto pair = EnginePair::Make(Mode::kShmMapped);
  RegionKey key;
  TestBuffer shared = pair->TargetBuffer(64 << 10, Access::kRemoteRead, &key);
  shared.Fill(5);
  TransferEngine& e = *pair->initiator;
  Result<PeerMemory> m = e.MapPeerMemory(pair->segment, key, 4096, 8192);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->length, 8192u);
  EXPECT_EQ(std::memcmp(m->data, shared.data() + 4096, 8192), 0);
  shared.data()[4096] = 'Q';  // The peer's live memory, not a copy.
  EXPECT_EQ(static_cast<const char*>(m->data)[0], 'Q');

  EXPECT_EQ(e.MapPeerMemory(pair->segment, key, 0, 0).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(e.MapPeerMemory(pair->segment, key, 60 << 10, 8192).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(e.MapPeerMemory(pair->segment, RegionKey{key.value + 1000}, 0, 1).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(e.MapPeerMemory(SegmentId{999}, key, 0, 1).status().code(),
            StatusCode::kInvalidArgument);
  TestBuffer plain = TestBuffer::Anonymous(4096);
  auto plain_key =
      pair->target->RegisterMemory(plain.data(), 4096, MemoryKind::kHost, Access::kRemoteRead);
  ASSERT_TRUE(plain_key.ok());
  ASSERT_TRUE(pair->AwaitRemoteKey(*plain_key));
  Result<PeerMemory> not_shared = e.MapPeerMemory(pair->segment, *plain_key, 0, 4096);
  EXPECT_EQ(not_shared.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(not_shared.status().message().find("not a shared allocation"), std::string_view::npos)
      << not_shared.status().ToString();

  RegionKey write_key;
  TestBuffer write_only = pair->TargetBuffer(64 << 10, Access::kRemoteWrite, &write_key);
  EXPECT_EQ(e.MapPeerMemory(pair->segment, write_key, 0, 4096).status().code(),
            StatusCode::kPermissionDenied);

  auto tcp = EnginePair::Make(Mode::kTcp);
  RegionKey tcp_key;
  TestBuffer over_tcp = tcp->TargetBuffer(4096, Access::kRemoteRead, &tcp_key);
  EXPECT_EQ(tcp->initiator->MapPeerMemory(tcp->segment, tcp_key, 0, 4096).status().code(),
            StatusCode::kFailedPrecondition);
}

// A same-host peer whose table puts a shared region past the end of its
// memfd: the initiator must refuse to touch memory outside the mapping,
// both for in-place views and for copies.
TEST(EngineMapTest, ARegionTablePointingOutsideItsAllocationIsRefused) {
  UniqueFd memfd(::memfd_create("sluice-test", MFD_CLOEXEC));
  ASSERT_TRUE(memfd.valid());
  constexpr std::uint64_t kSize = 1 << 20;
  ASSERT_EQ(::ftruncate(memfd.get(), kSize), 0);
  struct stat st {};
  ASSERT_EQ(::fstat(memfd.get(), &st), 0);
  internal::WireRegion r;
  r.info =
      RegionInfo{RegionKey{7}, 0x10000, 64 << 10, MemoryKind::kHost, Access::kRemoteRead, true};
  internal::AccessBlob shm{"shm", {}};
  // 64 KiB from kSize - 4096 runs 60 KiB past the end.
  internal::AppendSharedRef({memfd.get(), kSize - 4096, kSize, st.st_ino}, &shm.bytes);
  r.access.push_back(shm);
  const internal::HelloOk ok = ClaimingThisHost(r);

  std::uint16_t port = 0;
  auto listener = internal::Listen({"127.0.0.1", 0}, &port);
  ASSERT_TRUE(listener.ok());
  std::thread fake([&] {
    UniqueFd conn = AcceptAndGreet(listener->get(), ok);
    std::this_thread::sleep_for(1s);
  });
  EngineConfig c = ConfigFor(Mode::kShmMapped, true);
  c.connections_per_peer = 1;
  auto e = TransferEngine::Create(c);
  ASSERT_TRUE(e.ok());
  auto seg = (*e)->OpenSegment("127.0.0.1:" + std::to_string(port));
  ASSERT_TRUE(seg.ok()) << seg.status().ToString();
  Result<PeerMemory> m = (*e)->MapPeerMemory(*seg, RegionKey{7}, 0, 64 << 10);
  EXPECT_EQ(m.status().code(), StatusCode::kUnavailable) << m.status().ToString();
  EXPECT_NE(m.status().message().find("outside"), std::string_view::npos);
  TestBuffer dst = TestBuffer::Anonymous(64 << 10);
  ASSERT_TRUE(
      (*e)->RegisterMemory(dst.data(), dst.size(), MemoryKind::kHost, Access::kLocalOnly).ok());
  TransferRequest op{
      OpKind::kRead, dst.data(), *seg, RegionKey{7}, 0, dst.size(), TransportHint::kSameHostOnly};
  Status s = (*e)->TransferSync({&op, 1}, 5s);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_TRUE((*e)->MapPeerMemory(*seg, RegionKey{7}, 0, 4096).ok())
      << "the part inside the allocation maps";
  fake.join();
}

// A fake target that does not know the secret answers the handshake
// claiming this very host (the client's own host info, echoed) with a
// shared region at an address of its choosing. Before the handshake proved
// both ends, the client took that for a same-host peer and ran
// process_vm_readv/writev at the fake's addresses; now it refuses the
// handshake before it reads the claims, so no op can reach them.
TEST(EngineHandshakeTest, AFakeTargetWithoutTheSecretIsRefusedBeforeItsClaimsAreUsed) {
  TestBuffer bait = TestBuffer::Anonymous(4096);
  internal::WireRegion r;
  r.info = RegionInfo{RegionKey{7}, reinterpret_cast<std::uint64_t>(bait.data()), 4096,
                      MemoryKind::kHost, Access::kRemoteReadWrite};
  const internal::HelloOk ok = ClaimingThisHost(r);

  std::uint16_t port = 0;
  auto listener = internal::Listen({"127.0.0.1", 0}, &port);
  ASSERT_TRUE(listener.ok());
  std::thread fake([&] {
    UniqueFd conn = AcceptAndGreet(listener->get(), ok);
    char byte;
    (void)::recv(conn.get(), &byte, 1, 0);  // Until the client hangs up.
  });
  EngineConfig c = ConfigFor(Mode::kTcp, true);
  c.connections_per_peer = 1;
  c.secret = "correct horse";
  auto e = TransferEngine::Create(c);
  ASSERT_TRUE(e.ok());
  Result<SegmentId> seg = (*e)->OpenSegment("127.0.0.1:" + std::to_string(port));
  EXPECT_EQ(seg.status().code(), StatusCode::kPermissionDenied) << seg.status().ToString();
  EXPECT_NE(seg.status().message().find("did not prove the shared secret"), std::string_view::npos)
      << seg.status().ToString();
  e->reset();  // Closes the connection: the fake returns.
  fake.join();
}

// A stranger that connects and trickles a valid hello header one byte at a
// time (each byte is progress, so the stall timeout never fires) is closed
// at the handshake deadline. Before the deadline existed it held its
// connection and session for as long as it kept trickling.
TEST(EngineHandshakeTest, ATricklingConnectionIsClosedAtTheHandshakeDeadline) {
  EngineConfig c = ConfigFor(Mode::kTcp, false);
  c.handshake_timeout = 300ms;
  auto e = TransferEngine::Create(c);
  ASSERT_TRUE(e.ok());
  UniqueFd fd = RawConnect((*e)->endpoint());
  WireHeader h;
  std::string body;
  ASSERT_TRUE(ReadFrame(fd.get(), &h, &body));  // The server's hello.
  const WireHeader hello = internal::MakeHeader(FrameType::kClientHello, 0, 64);
  const char* bytes = reinterpret_cast<const char*>(&hello);
  const auto start = std::chrono::steady_clock::now();
  bool closed = false;
  for (std::size_t i = 0; i < sizeof(hello) && !closed; ++i) {
    closed = ::send(fd.get(), bytes + i, 1, MSG_NOSIGNAL) < 0;
    pollfd p{fd.get(), POLLIN, 0};
    if (!closed && ::poll(&p, 1, 100) > 0) {
      char b;
      closed = ::recv(fd.get(), &b, 1, 0) <= 0;
    }
  }
  EXPECT_TRUE(closed) << "the whole header trickled in over 4 s and the connection is still open";
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
}

// Strangers cannot pile up connections: beyond max_pending_handshakes, new
// ones are closed as they are accepted, while a peer that handshook before
// keeps moving bytes; once the pending ones meet their deadline, new peers
// get in again.
TEST(EngineHandshakeTest, PendingHandshakesAreCappedAndTheEngineKeepsServing) {
  constexpr int kCap = 8, kStrangers = 100;
  EngineConfig tc = ConfigFor(Mode::kTcp, false);
  tc.max_pending_handshakes = kCap;
  tc.handshake_timeout = 1500ms;
  auto target = TransferEngine::Create(tc);
  ASSERT_TRUE(target.ok());
  TestBuffer remote = TestBuffer::Anonymous(1 << 20);
  auto rkey = (*target)->RegisterMemory(remote.data(), remote.size(), MemoryKind::kHost,
                                        Access::kRemoteReadWrite);
  ASSERT_TRUE(rkey.ok());
  EngineConfig ic = ConfigFor(Mode::kTcp, true);
  ic.connections_per_peer = 1;
  auto init = TransferEngine::Create(ic);
  ASSERT_TRUE(init.ok());
  auto seg = (*init)->OpenSegment((*target)->endpoint());
  ASSERT_TRUE(seg.ok()) << seg.status().ToString();
  TestBuffer local = TestBuffer::Anonymous(1 << 20);
  ASSERT_TRUE(
      (*init)
          ->RegisterMemory(local.data(), local.size(), MemoryKind::kHost, Access::kLocalOnly)
          .ok());

  std::vector<UniqueFd> strangers;
  for (int i = 0; i < kStrangers; ++i) {
    strangers.push_back(RawConnect((*target)->endpoint()));
  }
  // Those over the cap see EOF at once; the others get the server's hello.
  int refused = 0;
  const auto deadline = std::chrono::steady_clock::now() + 1s;
  std::vector<bool> seen(kStrangers, false);
  while (refused < kStrangers - kCap && std::chrono::steady_clock::now() < deadline) {
    for (int i = 0; i < kStrangers; ++i) {
      pollfd p{strangers[i].get(), POLLIN, 0};
      char buf[128];
      if (!seen[i] && ::poll(&p, 1, 0) > 0 &&
          ::recv(strangers[i].get(), buf, sizeof(buf), MSG_DONTWAIT | MSG_PEEK) == 0) {
        seen[i] = true;
        ++refused;
      }
    }
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(refused, kStrangers - kCap);

  // The peer that handshook before is served throughout.
  local.Fill(3);
  TransferRequest w{OpKind::kWrite, local.data(),        *seg, *rkey, 0,
                    local.size(),   TransportHint::kAuto};
  ASSERT_TRUE((*init)->TransferSync({&w, 1}, 5s).ok());
  EXPECT_EQ(std::memcmp(remote.data(), local.data(), local.size()), 0);

  // After the deadline the pending strangers are gone and a new peer gets
  // in (a fresh engine per try: a refused one may keep its peer as failed).
  Status late = InvalidArgumentError("not tried");
  const auto until = std::chrono::steady_clock::now() + 6s;
  while (!late.ok() && std::chrono::steady_clock::now() < until) {
    auto e = TransferEngine::Create(ConfigFor(Mode::kTcp, true));
    ASSERT_TRUE(e.ok());
    late = (*e)->OpenSegment((*target)->endpoint()).status();
    if (!late.ok()) {
      std::this_thread::sleep_for(100ms);
    }
  }
  EXPECT_TRUE(late.ok()) << late.ToString();
}

// A peer that completes the handshake and then never reads: every pending
// op must fail with an endpoint-scope error within the op timeout.
TEST(EngineTimeoutTest, StalledPeerFailsPendingOpsWithinTheTimeout) {
  std::uint16_t port = 0;
  auto listener = internal::Listen({"127.0.0.1", 0}, &port);
  ASSERT_TRUE(listener.ok());
  std::thread fake([&] {
    UniqueFd conn = AcceptAndGreet(listener->get(), internal::HelloOk{});
    std::this_thread::sleep_for(1500ms);  // Never reads: the initiator's writes stall.
  });
  EngineConfig c = ConfigFor(Mode::kTcp, true);
  c.connections_per_peer = 1;
  c.op_timeout = 300ms;
  auto e = TransferEngine::Create(c);
  ASSERT_TRUE(e.ok());
  auto seg = (*e)->OpenSegment("127.0.0.1:" + std::to_string(port));
  ASSERT_TRUE(seg.ok()) << seg.status().ToString();
  TestBuffer buf = TestBuffer::Anonymous(64 << 20);
  ASSERT_TRUE(
      (*e)->RegisterMemory(buf.data(), buf.size(), MemoryKind::kHost, Access::kLocalOnly).ok());
  TransferRequest op{OpKind::kWrite, buf.data(),          *seg, RegionKey{1}, 0,
                     buf.size(),     TransportHint::kAuto};
  const auto start = std::chrono::steady_clock::now();
  Status s = (*e)->TransferSync({&op, 1}, 5s);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_EQ(s.scope(), FailureScope::kEndpoint);
  EXPECT_LT(took, 2s);
  // The peer is now known dead: new batches fail up front.
  EXPECT_EQ((*e)->Submit({&op, 1}).status().code(), StatusCode::kUnavailable);
  fake.join();
}

}  // namespace
}  // namespace sluice::testing
